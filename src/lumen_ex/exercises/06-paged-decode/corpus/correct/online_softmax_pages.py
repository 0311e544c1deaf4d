"""Correct: page by page with a running (online) softmax, as PagedAttention kernels do; slots past a
sequence's length masked inside the page."""

import math

import torch


def paged_decode_step(x_t, k_pages, v_pages, block_table, seq_lens, w_q, w_k, w_v, w_o, n_heads):
    B = x_t.shape[0]
    n_kv_heads, page_size, d_head = k_pages.shape[1:]
    group = n_heads // n_kv_heads
    q = (x_t @ w_q).reshape(B, n_kv_heads, group, d_head) / math.sqrt(d_head)
    for b in range(B):
        t = int(seq_lens[b])
        page = int(block_table[b, t // page_size])
        k_pages[page, :, t % page_size] = (x_t[b] @ w_k).reshape(n_kv_heads, d_head)
        v_pages[page, :, t % page_size] = (x_t[b] @ w_v).reshape(n_kv_heads, d_head)
    ys = []
    for b in range(B):
        t = int(seq_lens[b])
        running_max = torch.full((n_kv_heads, group), float("-inf"), dtype=x_t.dtype, device=x_t.device)
        denom = torch.zeros(n_kv_heads, group, dtype=x_t.dtype, device=x_t.device)
        acc = torch.zeros(n_kv_heads, group, d_head, dtype=x_t.dtype, device=x_t.device)
        for j in range(t // page_size + 1):
            p = block_table[b, j]
            filled = min(page_size, t + 1 - j * page_size)                 # slots of this page in 0..t
            k = k_pages[p, :, :filled]                                       # (n_kv, filled, d)
            v = v_pages[p, :, :filled]
            s = torch.einsum("kgd,knd->kgn", q[b], k)                        # (n_kv, group, filled)
            new_max = torch.maximum(running_max, s.amax(dim=-1))
            correction = torch.exp(running_max - new_max)
            e = torch.exp(s - new_max[..., None])
            denom = denom * correction + e.sum(dim=-1)
            acc = acc * correction[..., None] + torch.einsum("kgn,knd->kgd", e, v)
            running_max = new_max
        ys.append((acc / denom[..., None]).reshape(n_heads * d_head))
    return torch.stack(ys) @ w_o, k_pages, v_pages, seq_lens + 1

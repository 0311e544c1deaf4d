# bug: stacks the per-head scores as (n_heads, t + 1) and takes the softmax over dim=0, the heads, not the keys
# expect-kind: values
# expect-misconception: softmax-over-heads
import math

import torch


def paged_decode_step(x_t, k_pages, v_pages, block_table, seq_lens, w_q, w_k, w_v, w_o, n_heads):
    B = x_t.shape[0]
    n_kv_heads, page_size, d_head = k_pages.shape[1:]
    group = n_heads // n_kv_heads
    q = (x_t @ w_q).reshape(B, n_heads, d_head)
    k_new = (x_t @ w_k).reshape(B, n_kv_heads, d_head)
    v_new = (x_t @ w_v).reshape(B, n_kv_heads, d_head)
    outs = []
    for b in range(B):
        t = int(seq_lens[b])
        page = int(block_table[b, t // page_size])
        k_pages[page, :, t % page_size] = k_new[b]
        v_pages[page, :, t % page_size] = v_new[b]
        pos = torch.arange(t + 1)
        phys = block_table[b, pos // page_size]
        k = k_pages[phys, :, pos % page_size].repeat_interleave(group, dim=1)   # (t+1, H, d)
        v = v_pages[phys, :, pos % page_size].repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,lhd->hl", q[b], k) / math.sqrt(d_head)        # (H, t+1)
        weights = torch.softmax(scores, dim=0)
        outs.append(torch.einsum("hl,lhd->hd", weights, v).reshape(-1))
    return torch.stack(outs) @ w_o, k_pages, v_pages, seq_lens + 1

"""Correct: the write as one index_put_ (pages, heads, slots broadcast), the read per sequence through
its own pages, GQA by expand + reshape."""

import math

import torch


def paged_decode_step(x_t, k_pages, v_pages, block_table, seq_lens, w_q, w_k, w_v, w_o, n_heads):
    B = x_t.size(0)
    n_kv_heads, page_size, d_head = k_pages.size(1), k_pages.size(2), k_pages.size(3)
    group = n_heads // n_kv_heads
    page = block_table.gather(1, (seq_lens // page_size)[:, None])            # (B, 1)
    slot = (seq_lens % page_size)[:, None]                                    # (B, 1)
    heads = torch.arange(n_kv_heads, device=x_t.device)[None, :]              # (1, n_kv)
    k_pages.index_put_((page, heads, slot), (x_t @ w_k).reshape(B, n_kv_heads, d_head))
    v_pages.index_put_((page, heads, slot), (x_t @ w_v).reshape(B, n_kv_heads, d_head))

    q = (x_t @ w_q).reshape(B, n_heads, d_head)
    ys = []
    for b in range(B):
        t = int(seq_lens[b])
        n_used = t // page_size + 1
        pages = block_table[b, :n_used]
        k = k_pages[pages].transpose(0, 1).reshape(n_kv_heads, n_used * page_size, d_head)[:, : t + 1]
        v = v_pages[pages].transpose(0, 1).reshape(n_kv_heads, n_used * page_size, d_head)[:, : t + 1]
        k = k[:, None].expand(n_kv_heads, group, t + 1, d_head).reshape(n_heads, t + 1, d_head)
        v = v[:, None].expand(n_kv_heads, group, t + 1, d_head).reshape(n_heads, t + 1, d_head)
        w = torch.softmax(torch.einsum("hd,hnd->hn", q[b], k) / math.sqrt(d_head), dim=-1)
        ys.append(torch.einsum("hn,hnd->hd", w, v).reshape(n_heads * d_head))
    return torch.stack(ys) @ w_o, k_pages, v_pages, seq_lens + 1

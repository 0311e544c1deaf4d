"""Correct: one padded (B, L) gather for every sequence, a length mask, GQA by grouping the queries."""

import torch


def paged_decode_step(x_t, k_pages, v_pages, block_table, seq_lens, w_q, w_k, w_v, w_o, n_heads):
    B = x_t.shape[0]
    n_pages, n_kv_heads, page_size, d_head = k_pages.shape
    group = n_heads // n_kv_heads
    rows = torch.arange(B, device=x_t.device)
    page = block_table[rows, seq_lens // page_size]
    slot = seq_lens % page_size
    k_pages[page, :, slot] = (x_t @ w_k).view(B, n_kv_heads, d_head)
    v_pages[page, :, slot] = (x_t @ w_v).view(B, n_kv_heads, d_head)

    L = int(seq_lens.max().item()) + 1
    pos = torch.arange(L, device=x_t.device)[None, :].expand(B, L)           # (B, L)
    phys = torch.gather(block_table, 1, pos // page_size)                    # (B, L)
    k = k_pages[phys, :, pos % page_size]                                    # (B, L, n_kv_heads, d_head)
    v = v_pages[phys, :, pos % page_size]
    q = (x_t @ w_q).view(B, n_kv_heads, group, d_head)                       # grouped queries
    scores = torch.einsum("bkgd,blkd->bkgl", q, k) * d_head ** -0.5          # (B, n_kv, group, L)
    valid = pos <= seq_lens[:, None]                                         # (B, L)
    scores = scores.masked_fill(~valid[:, None, None, :], torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    out = torch.einsum("bkgl,blkd->bkgd", weights, v)                        # (B, n_kv, group, d_head)
    return out.reshape(B, n_heads * d_head) @ w_o, k_pages, v_pages, seq_lens + 1

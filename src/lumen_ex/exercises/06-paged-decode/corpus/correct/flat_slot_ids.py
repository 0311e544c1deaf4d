"""Correct: slot ids into the pools read as one flat (n_pages * page_size) axis; index_select per sequence."""

import math

import torch


def paged_decode_step(x_t, k_pages, v_pages, block_table, seq_lens, w_q, w_k, w_v, w_o, n_heads):
    B, _ = x_t.shape
    n_pages, n_kv_heads, page_size, d_head = k_pages.shape
    q = (x_t @ w_q).reshape(B, n_heads, 1, d_head)
    k_new = (x_t @ w_k).reshape(B, n_kv_heads, d_head)
    v_new = (x_t @ w_v).reshape(B, n_kv_heads, d_head)
    b_idx = torch.arange(B, device=x_t.device)
    page = block_table[b_idx, torch.div(seq_lens, page_size, rounding_mode="floor")]
    slot = torch.remainder(seq_lens, page_size)
    k_pages[page, :, slot] = k_new
    v_pages[page, :, slot] = v_new
    # (n_pages, n_kv, page_size, d) -> (n_pages * page_size, n_kv, d): slot id = page * page_size + slot
    k_flat = k_pages.transpose(1, 2).reshape(n_pages * page_size, n_kv_heads, d_head)
    v_flat = v_pages.transpose(1, 2).reshape(n_pages * page_size, n_kv_heads, d_head)
    ys = []
    for b in range(B):
        n = int(seq_lens[b]) + 1
        pos = torch.arange(n, device=x_t.device)
        ids = block_table[b, pos // page_size] * page_size + pos % page_size     # (n,)
        k = k_flat.index_select(0, ids).permute(1, 0, 2)                        # (n_kv, n, d)
        v = v_flat.index_select(0, ids).permute(1, 0, 2)
        k = k.repeat_interleave(n_heads // n_kv_heads, dim=0)                   # (n_heads, n, d)
        v = v.repeat_interleave(n_heads // n_kv_heads, dim=0)
        att = torch.softmax(q[b] @ k.transpose(-1, -2) / math.sqrt(d_head), dim=-1)   # (n_heads, 1, n)
        ys.append((att @ v).reshape(-1))
    return torch.stack(ys) @ w_o, k_pages, v_pages, seq_lens + 1

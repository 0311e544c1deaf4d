# bug: gathers every position through block_table[0] (the flattened index forgets the row), so every sequence reads sequence 0's pages
# expect-kind: values
# expect-misconception: other-sequence-pages
import math

import torch


def paged_decode_step(x_t, k_pages, v_pages, block_table, seq_lens, w_q, w_k, w_v, w_o, n_heads):
    B = x_t.shape[0]
    n_pages, n_kv_heads, page_size, d_head = k_pages.shape
    rows = torch.arange(B)
    page = block_table[rows, seq_lens // page_size]
    k_pages[page, :, seq_lens % page_size] = (x_t @ w_k).reshape(B, n_kv_heads, d_head)
    v_pages[page, :, seq_lens % page_size] = (x_t @ w_v).reshape(B, n_kv_heads, d_head)
    L = int(seq_lens.max()) + 1
    pos = torch.arange(L)
    # "flatten the table and look the pages up": but block_table.flatten()[j] is row 0's j-th page
    phys = block_table.flatten()[pos // page_size]                      # (L,), the same for every sequence
    k = k_pages[phys, :, pos % page_size].permute(1, 0, 2)              # (n_kv, L, d)
    v = v_pages[phys, :, pos % page_size].permute(1, 0, 2)
    group = n_heads // n_kv_heads
    k = k.repeat_interleave(group, dim=0)                               # (H, L, d)
    v = v.repeat_interleave(group, dim=0)
    q = (x_t @ w_q).reshape(B, n_heads, 1, d_head)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)                # (B, H, 1, L)
    scores = scores.masked_fill((pos[None, :] > seq_lens[:, None])[:, None, None, :], float("-inf"))
    y = (torch.softmax(scores, dim=-1) @ v).reshape(B, n_heads * d_head) @ w_o
    return y, k_pages, v_pages, seq_lens + 1

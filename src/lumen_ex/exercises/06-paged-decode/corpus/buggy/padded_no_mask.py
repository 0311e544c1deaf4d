# bug: pads every sequence to the longest one's length and forgets the length mask
# expect-kind: values
# expect-misconception: read-padded-to-longest
import math

import torch


def paged_decode_step(x_t, k_pages, v_pages, block_table, seq_lens, w_q, w_k, w_v, w_o, n_heads):
    B = x_t.shape[0]
    n_kv_heads, page_size, d_head = k_pages.shape[1:]
    b_idx = torch.arange(B)
    page = block_table[b_idx, seq_lens // page_size]
    k_pages[page, :, seq_lens % page_size] = (x_t @ w_k).reshape(B, n_kv_heads, d_head)
    v_pages[page, :, seq_lens % page_size] = (x_t @ w_v).reshape(B, n_kv_heads, d_head)
    L = int(seq_lens.max()) + 1
    pos = torch.arange(L)
    phys = block_table[:, pos // page_size]                            # (B, L)
    k = k_pages[phys, :, pos % page_size].transpose(1, 2)             # (B, n_kv, L, d)
    v = v_pages[phys, :, pos % page_size].transpose(1, 2)
    k = k.repeat_interleave(n_heads // n_kv_heads, dim=1)
    v = v.repeat_interleave(n_heads // n_kv_heads, dim=1)
    q = (x_t @ w_q).reshape(B, n_heads, 1, d_head)
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head), dim=-1)   # no mask: every sequence sees L keys
    return (w @ v).reshape(B, -1) @ w_o, k_pages, v_pages, seq_lens + 1

# bug: merges the heads and returns them without applying the output projection w_o
# expect-kind: shape
# expect-misconception: no-output-projection
import math

import torch


def paged_decode_step(x_t, k_pages, v_pages, block_table, seq_lens, w_q, w_k, w_v, w_o, n_heads):
    B = x_t.shape[0]
    n_kv_heads, page_size, d_head = k_pages.shape[1:]
    page = block_table[torch.arange(B), seq_lens // page_size]
    k_pages[page, :, seq_lens % page_size] = (x_t @ w_k).reshape(B, n_kv_heads, d_head)
    v_pages[page, :, seq_lens % page_size] = (x_t @ w_v).reshape(B, n_kv_heads, d_head)
    L = int(seq_lens.max()) + 1
    pos = torch.arange(L)
    phys = block_table[:, pos // page_size]
    group = n_heads // n_kv_heads
    k = k_pages[phys, :, pos % page_size].transpose(1, 2).repeat_interleave(group, dim=1)
    v = v_pages[phys, :, pos % page_size].transpose(1, 2).repeat_interleave(group, dim=1)
    q = (x_t @ w_q).reshape(B, n_heads, 1, d_head)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)
    scores = scores.masked_fill((pos[None, :] > seq_lens[:, None])[:, None, None, :], float("-inf"))
    y_t = (torch.softmax(scores, dim=-1) @ v).reshape(B, n_heads * d_head)      # heads merged, done?
    return y_t, k_pages, v_pages, seq_lens + 1

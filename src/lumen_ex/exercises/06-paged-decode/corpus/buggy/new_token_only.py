# bug: writes the new entry, then reads back only the slot it just wrote, so each sequence attends to its new token alone
# expect-kind: values
# expect-misconception: new-token-only
import math

import torch


def paged_decode_step(x_t, k_pages, v_pages, block_table, seq_lens, w_q, w_k, w_v, w_o, n_heads):
    B = x_t.shape[0]
    n_kv_heads, page_size, d_head = k_pages.shape[1:]
    page = block_table[torch.arange(B), seq_lens // page_size]
    slot = seq_lens % page_size
    k_pages[page, :, slot] = (x_t @ w_k).reshape(B, n_kv_heads, d_head)
    v_pages[page, :, slot] = (x_t @ w_v).reshape(B, n_kv_heads, d_head)
    group = n_heads // n_kv_heads
    k = k_pages[page, :, slot][:, :, None, :].repeat_interleave(group, dim=1)   # (B, H, 1, d)
    v = v_pages[page, :, slot][:, :, None, :].repeat_interleave(group, dim=1)
    q = (x_t @ w_q).reshape(B, n_heads, 1, d_head)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)                      # (B, H, 1, 1)
    y_t = (torch.softmax(scores, dim=-1) @ v).reshape(B, n_heads * d_head) @ w_o
    return y_t, k_pages, v_pages, seq_lens + 1

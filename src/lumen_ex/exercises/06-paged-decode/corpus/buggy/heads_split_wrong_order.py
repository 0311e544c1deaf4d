# bug: a split_heads helper reshapes the projections to (B, d_head, n) and transposes, so q, the new key and the new value are all split in the wrong order
# expect-kind: values
# expect-misconception: new-entry-split-wrong-order
import math

import torch


def split_heads(x, n):
    """(B, n * d_head) -> (B, n, d_head)"""
    B = x.shape[0]
    return x.reshape(B, -1, n).transpose(1, 2)


def paged_decode_step(x_t, k_pages, v_pages, block_table, seq_lens, w_q, w_k, w_v, w_o, n_heads):
    B = x_t.shape[0]
    n_kv_heads, page_size, d_head = k_pages.shape[1:]
    q = split_heads(x_t @ w_q, n_heads)
    k_new = split_heads(x_t @ w_k, n_kv_heads)
    v_new = split_heads(x_t @ w_v, n_kv_heads)
    page = block_table[torch.arange(B), seq_lens // page_size]
    k_pages[page, :, seq_lens % page_size] = k_new
    v_pages[page, :, seq_lens % page_size] = v_new
    L = int(seq_lens.max()) + 1
    pos = torch.arange(L)
    phys = block_table[:, pos // page_size]
    group = n_heads // n_kv_heads
    k = k_pages[phys, :, pos % page_size].transpose(1, 2).repeat_interleave(group, dim=1)
    v = v_pages[phys, :, pos % page_size].transpose(1, 2).repeat_interleave(group, dim=1)
    scores = q[:, :, None, :] @ k.transpose(-2, -1) / math.sqrt(d_head)
    scores = scores.masked_fill((pos[None, :] > seq_lens[:, None])[:, None, None, :], float("-inf"))
    y_t = (torch.softmax(scores, dim=-1) @ v).reshape(B, n_heads * d_head) @ w_o
    return y_t, k_pages, v_pages, seq_lens + 1

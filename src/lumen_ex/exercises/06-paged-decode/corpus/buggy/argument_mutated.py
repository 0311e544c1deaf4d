# bug: folds the 1/sqrt(d_head) scale into the query weights with w_q /= ..., which scales the caller's w_q in place
# expect-kind: side-effect
# expect-misconception: argument-mutated
# expect-test: test_seq_lens_and_inputs_unchanged
import math

import torch


def paged_decode_step(x_t, k_pages, v_pages, block_table, seq_lens, w_q, w_k, w_v, w_o, n_heads):
    B = x_t.shape[0]
    n_kv_heads, page_size, d_head = k_pages.shape[1:]
    w_q /= math.sqrt(d_head)                                            # scale once, in the weights
    q = (x_t @ w_q).reshape(B, n_heads, 1, d_head)
    page = block_table[torch.arange(B), seq_lens // page_size]
    k_pages[page, :, seq_lens % page_size] = (x_t @ w_k).reshape(B, n_kv_heads, d_head)
    v_pages[page, :, seq_lens % page_size] = (x_t @ w_v).reshape(B, n_kv_heads, d_head)
    L = int(seq_lens.max()) + 1
    pos = torch.arange(L)
    phys = block_table[:, pos // page_size]
    group = n_heads // n_kv_heads
    k = k_pages[phys, :, pos % page_size].transpose(1, 2).repeat_interleave(group, dim=1)
    v = v_pages[phys, :, pos % page_size].transpose(1, 2).repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-2, -1)
    scores = scores.masked_fill((pos[None, :] > seq_lens[:, None])[:, None, None, :], float("-inf"))
    y_t = (torch.softmax(scores, dim=-1) @ v).reshape(B, n_heads * d_head) @ w_o
    return y_t, k_pages, v_pages, seq_lens + 1

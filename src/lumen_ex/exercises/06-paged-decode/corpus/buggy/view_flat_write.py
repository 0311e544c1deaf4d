# bug: flattens the pools with .view(-1, d_head) to write by slot id: fine on a contiguous pool, an exception on a strided one
# expect-kind: exception
# expect-misconception: pool-view-copy
# expect-test: test_noncontiguous_inputs
import math

import torch


def paged_decode_step(x_t, k_pages, v_pages, block_table, seq_lens, w_q, w_k, w_v, w_o, n_heads):
    B = x_t.shape[0]
    n_pages, n_kv_heads, page_size, d_head = k_pages.shape
    k_flat = k_pages.view(-1, d_head)
    v_flat = v_pages.view(-1, d_head)
    page = block_table[torch.arange(B), seq_lens // page_size]
    heads = torch.arange(n_kv_heads)
    rows = (page[:, None] * n_kv_heads + heads[None, :]) * page_size + (seq_lens % page_size)[:, None]
    k_flat[rows] = (x_t @ w_k).reshape(B, n_kv_heads, d_head)
    v_flat[rows] = (x_t @ w_v).reshape(B, n_kv_heads, d_head)
    L = int(seq_lens.max()) + 1
    pos = torch.arange(L)
    phys = block_table[:, pos // page_size]
    k = k_pages[phys, :, pos % page_size].transpose(1, 2).repeat_interleave(n_heads // n_kv_heads, dim=1)
    v = v_pages[phys, :, pos % page_size].transpose(1, 2).repeat_interleave(n_heads // n_kv_heads, dim=1)
    q = (x_t @ w_q).reshape(B, n_heads, 1, d_head)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)
    scores = scores.masked_fill((pos[None, :] > seq_lens[:, None])[:, None, None, :], float("-inf"))
    return (torch.softmax(scores, dim=-1) @ v).reshape(B, -1) @ w_o, k_pages, v_pages, seq_lens + 1

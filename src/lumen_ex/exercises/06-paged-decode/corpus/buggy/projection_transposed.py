# bug: projects with F.linear(x_t, w), which computes x_t @ w.T, so the (d_model, n * d_head) weights do not fit
# expect-kind: exception
# expect-misconception: projection-transposed
import math

import torch
import torch.nn.functional as F


def paged_decode_step(x_t, k_pages, v_pages, block_table, seq_lens, w_q, w_k, w_v, w_o, n_heads):
    B = x_t.shape[0]
    n_kv_heads, page_size, d_head = k_pages.shape[1:]
    q = F.linear(x_t, w_q).reshape(B, n_heads, 1, d_head)
    k_new = F.linear(x_t, w_k).reshape(B, n_kv_heads, d_head)
    v_new = F.linear(x_t, w_v).reshape(B, n_kv_heads, d_head)
    page = block_table[torch.arange(B), seq_lens // page_size]
    k_pages[page, :, seq_lens % page_size] = k_new
    v_pages[page, :, seq_lens % page_size] = v_new
    L = int(seq_lens.max()) + 1
    pos = torch.arange(L)
    phys = block_table[:, pos // page_size]
    group = n_heads // n_kv_heads
    k = k_pages[phys, :, pos % page_size].transpose(1, 2).repeat_interleave(group, dim=1)
    v = v_pages[phys, :, pos % page_size].transpose(1, 2).repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)
    scores = scores.masked_fill((pos[None, :] > seq_lens[:, None])[:, None, None, :], float("-inf"))
    out = (torch.softmax(scores, dim=-1) @ v).reshape(B, n_heads * d_head)
    return F.linear(out, w_o), k_pages, v_pages, seq_lens + 1

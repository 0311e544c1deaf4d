# expect-note: test_dtype[float64]
"""Correct: the softmax computed in float32 and cast back (as llama does); the read through a boolean
length mask over the pages each sequence owns."""

import math

import torch
import torch.nn.functional as F


def paged_decode_step(x_t, k_pages, v_pages, block_table, seq_lens, w_q, w_k, w_v, w_o, n_heads):
    B = x_t.shape[0]
    _, n_kv_heads, page_size, d_head = k_pages.shape
    max_pages = block_table.shape[1]
    new_k = (x_t @ w_k).unflatten(-1, (n_kv_heads, d_head))
    new_v = (x_t @ w_v).unflatten(-1, (n_kv_heads, d_head))
    where = block_table[torch.arange(B, device=x_t.device), seq_lens // page_size]
    k_pages[where, :, seq_lens % page_size] = new_k
    v_pages[where, :, seq_lens % page_size] = new_v
    # every entry of the block table, then a mask: positions 0..t of each sequence
    k = k_pages[block_table].permute(0, 2, 1, 3, 4).reshape(B, n_kv_heads, max_pages * page_size, d_head)
    v = v_pages[block_table].permute(0, 2, 1, 3, 4).reshape(B, n_kv_heads, max_pages * page_size, d_head)
    k = torch.repeat_interleave(k, n_heads // n_kv_heads, dim=1)
    v = torch.repeat_interleave(v, n_heads // n_kv_heads, dim=1)
    q = (x_t @ w_q).unflatten(-1, (n_heads, d_head)).unsqueeze(2)          # (B, H, 1, d)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)                    # (B, H, 1, max_pages * page_size)
    positions = torch.arange(max_pages * page_size, device=x_t.device)
    keep = positions[None, :] <= seq_lens[:, None]
    scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
    weights = F.softmax(scores.float(), dim=-1).type_as(q)
    y = (weights @ v).squeeze(2).flatten(1) @ w_o
    return y, k_pages, v_pages, seq_lens + 1

"""Reference for exercise 6: one decoding step over a paged KV cache (PagedAttention).

Shapes: B sequences, d_model width, n_heads query heads, n_kv_heads key/value heads (n_kv_heads
divides n_heads; query head h reads KV head h // (n_heads // n_kv_heads)), d_head =
w_q.shape[1] // n_heads. The cache is a shared pool of pages, k_pages and v_pages (n_pages,
n_kv_heads, page_size, d_head); sequence b's j-th logical page is physical page block_table[b, j],
and seq_lens[b] tokens are cached for it. Projections are ``x @ W``.
"""

from __future__ import annotations

import math

import torch


def paged_decode_step(x_t, k_pages, v_pages, block_table, seq_lens, w_q, w_k, w_v, w_o, n_heads):
    """One decoding step for B sequences of different lengths that share one pool of pages.

    The new token of sequence b goes at position t = seq_lens[b]: physical page
    block_table[b, t // page_size], slot t % page_size, written into the pools in place. Sequence b
    then attends to exactly its positions 0..t. Returns (y_t, k_pages, v_pages, seq_lens + 1): the
    same pool tensors, now holding the new entries, and new lengths (the caller's are not changed).
    """
    B = x_t.shape[0]
    _, n_kv_heads, page_size, d_head = k_pages.shape
    q = (x_t @ w_q).reshape(B, n_heads, d_head)                  # (B, n_heads, d_head)
    k_new = (x_t @ w_k).reshape(B, n_kv_heads, d_head)           # (B, n_kv_heads, d_head)
    v_new = (x_t @ w_v).reshape(B, n_kv_heads, d_head)           # (B, n_kv_heads, d_head)

    # Write first: the new token must see itself. One (page, slot) per sequence, all distinct.
    rows = torch.arange(B, device=x_t.device)                    # (B,)
    page = block_table[rows, seq_lens // page_size]              # (B,) physical pages
    slot = seq_lens % page_size                                  # (B,)
    k_pages[page, :, slot] = k_new                               # (B, n_kv_heads, d_head) into the pool
    v_pages[page, :, slot] = v_new

    # Gather every sequence's positions 0..L-1 (L = the longest length), and mask each beyond its own t.
    L = int(seq_lens.max()) + 1
    pos = torch.arange(L, device=x_t.device)                     # (L,)
    pages = block_table[:, pos // page_size]                     # (B, L) physical page of each position
    slots = (pos % page_size).expand(B, L)                       # (B, L)
    k = k_pages[pages, :, slots].permute(0, 2, 1, 3)             # (B, n_kv_heads, L, d_head)
    v = v_pages[pages, :, slots].permute(0, 2, 1, 3)             # (B, n_kv_heads, L, d_head)
    group = n_heads // n_kv_heads
    k = k.repeat_interleave(group, dim=1)                        # (B, n_heads, L, d_head)
    v = v.repeat_interleave(group, dim=1)                        # (B, n_heads, L, d_head)

    scores = (q[:, :, None, :] @ k.transpose(-2, -1)) / math.sqrt(d_head)   # (B, n_heads, 1, L)
    seen = pos[None, :] <= seq_lens[:, None]                     # (B, L): positions 0..t of each sequence
    scores = scores.masked_fill(~seen[:, None, None, :], float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v                      # (B, n_heads, 1, d_head)
    y_t = out.reshape(B, n_heads * d_head) @ w_o                 # (B, d_model)
    return y_t, k_pages, v_pages, seq_lens + 1

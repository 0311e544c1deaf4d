"""Reference for exercise 3: prefill, causal multi-head (grouped-query) attention over a whole prompt.

Shapes: B batch, L prompt tokens, d_model width, n_heads query heads, n_kv_heads key/value heads
(n_kv_heads divides n_heads; query head h reads KV head h // (n_heads // n_kv_heads)),
d_head = w_q.shape[1] // n_heads, n_kv_heads = w_k.shape[1] // d_head. Projections are ``x @ W``.
The caches returned are the ones exercise 2's decode_step continues from.
"""

from __future__ import annotations

import math

import torch


def prefill(x, w_q, w_k, w_v, w_o, n_heads):
    """Causal self-attention over the prompt x (B, L, d_model), and the prompt's KV caches.

    Token i attends to tokens 0..i. Returns y (B, L, d_model) and k_cache, v_cache
    (B, n_kv_heads, L, d_head): every token's key and value per KV head, before attention.
    """
    B, L, _ = x.shape
    d_head = w_q.shape[1] // n_heads
    n_kv_heads = w_k.shape[1] // d_head
    q = (x @ w_q).reshape(B, L, n_heads, d_head).transpose(1, 2)       # (B, n_heads, L, d_head)
    k = (x @ w_k).reshape(B, L, n_kv_heads, d_head).transpose(1, 2)    # (B, n_kv_heads, L, d_head)
    v = (x @ w_v).reshape(B, L, n_kv_heads, d_head).transpose(1, 2)    # (B, n_kv_heads, L, d_head)
    group = n_heads // n_kv_heads
    k_all = k.repeat_interleave(group, dim=1)                          # (B, n_heads, L, d_head)
    v_all = v.repeat_interleave(group, dim=1)                          # (B, n_heads, L, d_head)
    scores = q @ k_all.transpose(-2, -1) / math.sqrt(d_head)           # (B, n_heads, L, L)
    mask = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()  # (L, L): token i sees 0..i
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)                            # (B, n_heads, L, L), rows sum to 1
    out = weights @ v_all                                              # (B, n_heads, L, d_head)
    y = out.transpose(1, 2).reshape(B, L, n_heads * d_head) @ w_o      # (B, L, d_model)
    return y, k, v

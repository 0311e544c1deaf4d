"""Reference for exercise 2: multi-head / grouped-query attention, full and cached.

Shapes: B batch, T tokens already cached, d_model width, n_heads query heads, n_kv_heads key/value
heads (n_kv_heads divides n_heads; query head h reads KV head h // (n_heads // n_kv_heads)),
d_head = w_q.shape[1] // n_heads. Projections are ``x @ W``.
"""

from __future__ import annotations

import math

import torch


def split_heads(x, n):
    """(B, L, n * d_head) -> (B, n, L, d_head)"""
    B, L, width = x.shape
    return x.reshape(B, L, n, width // n).transpose(1, 2)


def merge_heads(x):
    """(B, n, L, d_head) -> (B, L, n * d_head)"""
    B, n, L, d_head = x.shape
    return x.transpose(1, 2).reshape(B, L, n * d_head)


def expand_kv(x, n_heads):
    """(B, n_kv_heads, T, d_head) -> (B, n_heads, T, d_head): each KV head serves a block of queries."""
    return x.repeat_interleave(n_heads // x.shape[1], dim=1)


def attend(q, k, v, mask=None):
    """Plain attention over the last two axes: q (..., L_q, d), k (..., L_k, d), v (..., L_k, d)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])    # (..., L_q, L_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v                     # (..., L_q, d)


def causal_self_attention(x, w_q, w_k, w_v, w_o, n_heads):
    """Full-sequence causal multi-head (grouped-query) attention: x (B, L, d_model) -> (B, L, d_model)."""
    d_head = w_q.shape[1] // n_heads
    n_kv_heads = w_k.shape[1] // d_head
    q = split_heads(x @ w_q, n_heads)                            # (B, n_heads, L, d_head)
    k = expand_kv(split_heads(x @ w_k, n_kv_heads), n_heads)     # (B, n_heads, L, d_head)
    v = expand_kv(split_heads(x @ w_v, n_kv_heads), n_heads)     # (B, n_heads, L, d_head)
    L = x.shape[1]
    mask = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()  # (L, L), token t sees 0..t
    return merge_heads(attend(q, k, v, mask)) @ w_o              # (B, L, d_model)


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    """One decoding step with a KV cache.

    x_t (B, d_model) is the newest token; k_cache, v_cache (B, n_kv_heads, T, d_head) hold the T
    earlier tokens (T may be 0). Returns y_t (B, d_model) and the caches grown to T + 1; the caller's
    tensors are left untouched. Cost per step is linear in T: one query against T + 1 keys.
    """
    B, n_kv_heads, _, d_head = k_cache.shape
    x = x_t[:, None, :]                                          # (B, 1, d_model)
    q = split_heads(x @ w_q, n_heads)                            # (B, n_heads, 1, d_head)
    k_new = split_heads(x @ w_k, n_kv_heads)                     # (B, n_kv_heads, 1, d_head)
    v_new = split_heads(x @ w_v, n_kv_heads)                     # (B, n_kv_heads, 1, d_head)
    k_cache = torch.cat([k_cache, k_new], dim=2)                 # (B, n_kv_heads, T + 1, d_head), a new tensor
    v_cache = torch.cat([v_cache, v_new], dim=2)
    # The newest token may see every cached token and itself: no mask for a single query.
    out = attend(q, expand_kv(k_cache, n_heads), expand_kv(v_cache, n_heads))  # (B, n_heads, 1, d_head)
    y_t = (merge_heads(out) @ w_o)[:, 0, :]                      # (B, d_model)
    return y_t, k_cache, v_cache

"""Reference for exercise 10: one decoding step over a StreamingLLM cache (attention sinks + a ring window).

Shapes: B batch, H query heads, H_kv key/value heads (H_kv divides H; query head h reads KV head
h // (H // H_kv)), d the width of one head, C = n_sink + window the cache's capacity in tokens.
Token t (counted from 0) lives at slot t while the cache is filling (t < C); after that the first
n_sink slots keep the first n_sink tokens for ever, and token t >= n_sink lives at slot
n_sink + (t - n_sink) % window of the window's ring (the same formula gives slot t while t < C).
"""

from __future__ import annotations

import math

import torch


def slot_of(t: int, n_sink: int, window: int) -> int:
    """The cache slot token t lives in."""
    return t if t < n_sink else n_sink + (t - n_sink) % window


def streaming_decode_step(q_t, k_t, v_t, k_cache, v_cache, n_seen, n_sink, window):
    """Store the new token's key and value, then attend from its query to every occupied slot.

    q_t (B, H, d); k_t, v_t (B, H_kv, d); k_cache, v_cache (B, H_kv, C, d) with C = n_sink + window;
    n_seen: the tokens seen before this one. Returns (out_t (B, H, d), k_cache, v_cache), the caches
    as new tensors holding the new token (the caller's are left untouched).
    """
    d = q_t.shape[-1]
    C = n_sink + window
    slot = slot_of(n_seen, n_sink, window)                       # where the new token goes
    k_cache = k_cache.clone()                                    # (B, H_kv, C, d), a new tensor
    v_cache = v_cache.clone()
    k_cache[:, :, slot] = k_t                                    # (B, H_kv, d) into its slot
    v_cache[:, :, slot] = v_t

    # After the write the occupied slots are always a prefix: 0..n_seen while filling, all C after.
    n_occ = min(n_seen + 1, C)
    group = q_t.shape[1] // k_cache.shape[1]
    k = k_cache[:, :, :n_occ].repeat_interleave(group, dim=1)    # (B, H, n_occ, d)
    v = v_cache[:, :, :n_occ].repeat_interleave(group, dim=1)    # (B, H, n_occ, d)
    scores = (q_t[:, :, None, :] @ k.transpose(-2, -1)) / math.sqrt(d)   # (B, H, 1, n_occ)
    out_t = (torch.softmax(scores, dim=-1) @ v)[:, :, 0, :]      # (B, H, d)
    return out_t, k_cache, v_cache


def visible_tokens(t: int, n_sink: int, window: int) -> list[int]:
    """The tokens the query of token t attends to: the sinks and the last ``window`` tokens, t included."""
    sinks = range(min(n_sink, t + 1))
    recent = range(max(n_sink, t - window + 1), t + 1)
    return [*sinks, *recent]


def sink_window_attention(q, k, v, n_sink, window):
    """The same attention computed from the whole sequence, with no cache: q (B, H, L, d), k and v
    (B, H_kv, L, d) -> (B, H, L, d), token t attending to visible_tokens(t)."""
    B, H, L, d = q.shape
    group = H // k.shape[1]
    k = k.repeat_interleave(group, dim=1)                        # (B, H, L, d)
    v = v.repeat_interleave(group, dim=1)
    allowed = torch.zeros(L, L, dtype=torch.bool)                # (L, L): query t may see key s
    for t in range(L):
        allowed[t, visible_tokens(t, n_sink, window)] = True
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)              # (B, H, L, L)
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v                     # (B, H, L, d)

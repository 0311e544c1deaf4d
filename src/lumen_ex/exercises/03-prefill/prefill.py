"""Exercise 3: prefill, causal attention over a prompt. Read README.md in this folder first."""

import math

import torch


def prefill(x, w_q, w_k, w_v, w_o, n_heads):
    """Causal multi-head (grouped-query) self-attention over the prompt, and its KV caches.

    x: (B, L, d_model), the prompt: L tokens per batch item.
    w_q: (d_model, n_heads * d_head); w_k, w_v: (d_model, n_kv_heads * d_head); w_o: (n_heads * d_head, d_model).
    Returns (y, k_cache, v_cache): y (B, L, d_model), where token i has attended to tokens 0..i, and
    the caches (B, n_kv_heads, L, d_head), every token's key and value, ready for decode_step.
    """
    # TODO: read the sizes: d_head = w_q.shape[1] // n_heads, n_kv_heads = w_k.shape[1] // d_head.
    # TODO: project x into queries, keys and values, and split them into heads (B, heads, L, d_head).
    # TODO: attend causally: token i sees tokens 0..i (query head h reads KV head h // (n_heads // n_kv_heads)).
    # TODO: merge the heads back to (B, L, n_heads * d_head) and apply the output projection.
    # TODO: return y and the keys and values per KV head, before attention, as the caches.
    raise NotImplementedError("prefill is not written yet")

"""Exercise 2: one decoding step with a KV cache. Read README.md in this folder first."""

import math

import torch


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    """Attend from the newest token to every earlier one, using (and growing) the KV cache.

    x_t: (B, d_model), the newest token.
    k_cache, v_cache: (B, n_kv_heads, T, d_head), keys and values of the T earlier tokens (T may be 0).
    w_q: (d_model, n_heads * d_head); w_k, w_v: (d_model, n_kv_heads * d_head); w_o: (n_heads * d_head, d_model).
    Returns (y_t, k_cache, v_cache): y_t (B, d_model) and the caches grown to T + 1 along the time axis.
    """
    # TODO: project x_t into a query, a key and a value, and split them into heads.
    # TODO: append the new key and value to the caches (without modifying the caller's tensors).
    # TODO: attend from the query to all T + 1 keys (query head h reads KV head h // (n_heads // n_kv_heads)).
    # TODO: merge the heads and apply the output projection.
    raise NotImplementedError("decode_step is not written yet")

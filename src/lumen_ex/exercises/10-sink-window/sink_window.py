"""Exercise 10: one decoding step over a StreamingLLM cache (attention sinks + a ring window). Read README.md in this folder first."""

import math

import torch


def streaming_decode_step(q_t, k_t, v_t, k_cache, v_cache, n_seen, n_sink, window):
    """Store the newest token's key and value in a fixed-size cache, then attend to every occupied slot.

    q_t: (B, H, d), the newest token's query, one per query head.
    k_t, v_t: (B, H_kv, d), its key and value, one per key/value head (H_kv divides H).
    k_cache, v_cache: (B, H_kv, C, d) with C = n_sink + window slots; slots not yet written hold zeros.
    n_seen: int, the tokens seen before this one (the new token is token number n_seen, counted from 0).
    n_sink, window: ints; the first n_sink tokens are never evicted, the last `window` tokens form a ring.
    Returns (out_t, k_cache, v_cache): out_t (B, H, d) and the caches as new tensors, holding the new token.
    """
    # TODO: find the new token's slot: n_seen while the cache fills (n_seen < C), else n_sink + (n_seen - n_sink) % window.
    # TODO: store k_t and v_t there, in copies of the caches (leave the caller's untouched).
    # TODO: attend from q_t to the occupied slots only, 0..min(n_seen, C - 1): GQA, query head h reads KV head h // (H // H_kv).
    # TODO: scale the scores by 1 / sqrt(d), softmax over the slots, mix the values.
    raise NotImplementedError("streaming_decode_step is not written yet")

# bug: reads the README's inclusive slot range 0..min(n_seen, C - 1) as a Python slice end, so it attends one slot too few: never the new token while the cache fills, and not the last slot once it is full
# expect-kind: values
# expect-test: test_attends_sinks_and_window

import math

import torch


def streaming_decode_step(q_t, k_t, v_t, k_cache, v_cache, n_seen, n_sink, window):
    C = n_sink + window
    slot = n_seen if n_seen < C else n_sink + (n_seen - n_sink) % window
    k_cache = k_cache.clone()
    v_cache = v_cache.clone()
    k_cache[:, :, slot] = k_t
    v_cache[:, :, slot] = v_t
    n_occ = min(n_seen, C - 1)
    g = q_t.shape[1] // k_t.shape[1]
    k = k_cache[:, :, :n_occ].repeat_interleave(g, dim=1)
    v = v_cache[:, :, :n_occ].repeat_interleave(g, dim=1)
    scores = q_t.unsqueeze(2) @ k.transpose(-2, -1) / math.sqrt(q_t.shape[-1])
    out_t = (torch.softmax(scores, dim=-1) @ v).squeeze(2)
    return out_t, k_cache, v_cache

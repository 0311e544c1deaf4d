# Loops over the batch and the query heads, gathering the occupied slots one list at a time.
import math

import torch


def streaming_decode_step(q_t, k_t, v_t, k_cache, v_cache, n_seen, n_sink, window):
    B, H, d = q_t.shape
    H_kv, C = k_cache.shape[1], k_cache.shape[2]
    if n_seen < C:
        slot = n_seen
    else:
        slot = n_sink + (n_seen - n_sink) % window
    new_k = k_cache.clone()
    new_v = v_cache.clone()
    new_k[:, :, slot, :] = k_t
    new_v[:, :, slot, :] = v_t
    filled = [j for j in range(C) if j <= n_seen]          # every slot once the cache is full
    out = torch.empty_like(q_t)
    group = H // H_kv
    for b in range(B):
        for h in range(H):
            g = h // group
            keys = new_k[b, g, filled]                     # (n, d)
            vals = new_v[b, g, filled]
            w = torch.softmax(keys @ q_t[b, h] / math.sqrt(d), dim=0)   # (n,)
            out[b, h] = w @ vals
    return out, new_k, new_v

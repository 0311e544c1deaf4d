# bug: attends to the occupied slots plus the new token, but returns copies of the caches it was given, without the new token
# expect-kind: values
# expect-misconception: cache-not-written
import math

import torch


def streaming_decode_step(q_t, k_t, v_t, k_cache, v_cache, n_seen, n_sink, window):
    C = n_sink + window
    slot = n_seen if n_seen < C else n_sink + (n_seen - n_sink) % window
    k = k_cache.clone()
    v = v_cache.clone()
    k[:, :, slot] = k_t
    v[:, :, slot] = v_t
    n = min(n_seen + 1, C)
    group = q_t.shape[1] // k.shape[1]
    k = k[:, :, :n].repeat_interleave(group, dim=1)
    v = v[:, :, :n].repeat_interleave(group, dim=1)
    out_t = (torch.softmax((q_t[:, :, None, :] @ k.transpose(-2, -1)) / math.sqrt(q_t.shape[-1]), dim=-1) @ v)[:, :, 0, :]
    return out_t, k_cache.clone(), v_cache.clone()

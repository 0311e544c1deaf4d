# bug: attends over all C slots at every step, so while the cache fills the empty (zero) slots take weight too
# expect-kind: values
# expect-misconception: empty-slots-attended
import math

import torch


def streaming_decode_step(q_t, k_t, v_t, k_cache, v_cache, n_seen, n_sink, window):
    C = n_sink + window
    slot = n_seen if n_seen < C else n_sink + (n_seen - n_sink) % window
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    k_cache[:, :, slot] = k_t
    v_cache[:, :, slot] = v_t
    group = q_t.shape[1] // k_cache.shape[1]
    k = k_cache.repeat_interleave(group, dim=1)                           # (B, H, C, d)
    v = v_cache.repeat_interleave(group, dim=1)
    scores = (q_t[:, :, None, :] @ k.transpose(-2, -1)) / math.sqrt(q_t.shape[-1])
    out_t = (torch.softmax(scores, dim=-1) @ v)[:, :, 0, :]
    return out_t, k_cache, v_cache

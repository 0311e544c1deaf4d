# bug: attends over the caller's caches first and stores the new token afterwards, so its own slot still holds the old entry
# expect-kind: values
# expect-misconception: written-after-attending
import math

import torch


def streaming_decode_step(q_t, k_t, v_t, k_cache, v_cache, n_seen, n_sink, window):
    C = n_sink + window
    n = min(n_seen + 1, C)
    group = q_t.shape[1] // k_cache.shape[1]
    k = k_cache[:, :, :n].repeat_interleave(group, dim=1)
    v = v_cache[:, :, :n].repeat_interleave(group, dim=1)
    scores = (q_t[:, :, None, :] @ k.transpose(-2, -1)) / math.sqrt(q_t.shape[-1])
    out_t = (torch.softmax(scores, dim=-1) @ v)[:, :, 0, :]
    # now store the new token
    slot = n_seen if n_seen < C else n_sink + (n_seen - n_sink) % window
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    k_cache[:, :, slot] = k_t
    v_cache[:, :, slot] = v_t
    return out_t, k_cache, v_cache

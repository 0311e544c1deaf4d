# bug: keeps the sinks but slides the window like a queue (drop its first slot, append the new token at the end) instead of overwriting one ring slot
# expect-kind: values
# expect-misconception: window-shifted
import math

import torch


def streaming_decode_step(q_t, k_t, v_t, k_cache, v_cache, n_seen, n_sink, window):
    C = n_sink + window
    if n_seen < C:
        k_cache, v_cache = k_cache.clone(), v_cache.clone()
        k_cache[:, :, n_seen] = k_t
        v_cache[:, :, n_seen] = v_t
    else:
        k_cache = torch.cat([k_cache[:, :, :n_sink], k_cache[:, :, n_sink + 1:], k_t[:, :, None]], dim=2)
        v_cache = torch.cat([v_cache[:, :, :n_sink], v_cache[:, :, n_sink + 1:], v_t[:, :, None]], dim=2)
    n = min(n_seen + 1, C)
    group = q_t.shape[1] // k_cache.shape[1]
    k = k_cache[:, :, :n].repeat_interleave(group, dim=1)                 # (B, H, n, d)
    v = v_cache[:, :, :n].repeat_interleave(group, dim=1)
    scores = (q_t[:, :, None, :] @ k.transpose(-2, -1)) / math.sqrt(q_t.shape[-1])
    out_t = (torch.softmax(scores, dim=-1) @ v)[:, :, 0, :]
    return out_t, k_cache, v_cache

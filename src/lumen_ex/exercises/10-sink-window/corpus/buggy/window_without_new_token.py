# bug: attends to the cache as it came plus the new token, and evicts afterwards: once full the query sees C + 1 keys
# expect-kind: values
# expect-misconception: window-without-new-token
import math

import torch


def streaming_decode_step(q_t, k_t, v_t, k_cache, v_cache, n_seen, n_sink, window):
    C = n_sink + window
    old = min(n_seen, C)                                                  # what the cache held before
    k = torch.cat([k_cache[:, :, :old], k_t[:, :, None]], dim=2)          # (B, H_kv, old + 1, d)
    v = torch.cat([v_cache[:, :, :old], v_t[:, :, None]], dim=2)
    group = q_t.shape[1] // k_cache.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    w = torch.softmax((q_t[:, :, None, :] @ k.transpose(-2, -1)) / math.sqrt(q_t.shape[-1]), dim=-1)
    out_t = (w @ v)[:, :, 0, :]
    slot = n_seen if n_seen < C else n_sink + (n_seen - n_sink) % window   # evict for the next step
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    k_cache[:, :, slot] = k_t
    v_cache[:, :, slot] = v_t
    return out_t, k_cache, v_cache

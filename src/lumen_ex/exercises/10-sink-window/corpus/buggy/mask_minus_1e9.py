# bug: masks the empty slots with -1e9, which float16 cannot hold
# expect-kind: exception
# expect-misconception: fill-overflows-dtype
# expect-test: test_dtype[float16]
import math

import torch


def streaming_decode_step(q_t, k_t, v_t, k_cache, v_cache, n_seen, n_sink, window):
    C = n_sink + window
    slot = n_seen if n_seen < C else n_sink + (n_seen - n_sink) % window
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    k_cache[:, :, slot] = k_t
    v_cache[:, :, slot] = v_t
    group = q_t.shape[1] // k_cache.shape[1]
    k = k_cache.repeat_interleave(group, dim=1)
    v = v_cache.repeat_interleave(group, dim=1)
    scores = (q_t[:, :, None, :] @ k.transpose(-2, -1)) / math.sqrt(q_t.shape[-1])   # (B, H, 1, C)
    empty = torch.arange(C, device=q_t.device) > n_seen
    scores = scores.masked_fill(empty, -1e9)
    out_t = (torch.softmax(scores, dim=-1) @ v)[:, :, 0, :]
    return out_t, k_cache, v_cache

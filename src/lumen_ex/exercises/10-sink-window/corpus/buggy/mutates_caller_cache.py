# bug: writes the new token straight into the caller's caches (no copy), as an in-place serving cache would
# expect-kind: side-effect
# expect-misconception: caller-cache-mutated
# expect-test: test_caller_caches_unchanged
import math

import torch


def streaming_decode_step(q_t, k_t, v_t, k_cache, v_cache, n_seen, n_sink, window):
    C = n_sink + window
    slot = n_seen if n_seen < C else n_sink + (n_seen - n_sink) % window
    k_cache[:, :, slot] = k_t
    v_cache[:, :, slot] = v_t
    n = min(n_seen + 1, C)
    group = q_t.shape[1] // k_cache.shape[1]
    k = k_cache[:, :, :n].repeat_interleave(group, dim=1)                 # (B, H, n, d)
    v = v_cache[:, :, :n].repeat_interleave(group, dim=1)
    scores = (q_t[:, :, None, :] @ k.transpose(-2, -1)) / math.sqrt(q_t.shape[-1])
    out_t = (torch.softmax(scores, dim=-1) @ v)[:, :, 0, :]
    return out_t, k_cache, v_cache

# expect-note: test_dtype[float64]
# Computes the attention in float32 whatever the inputs' dtype, as llama does, and casts back.
import math

import torch


def streaming_decode_step(q_t, k_t, v_t, k_cache, v_cache, n_seen, n_sink, window):
    C = n_sink + window
    slot = n_seen if n_seen < C else n_sink + (n_seen - n_sink) % window
    k_cache = k_cache.clone()
    v_cache = v_cache.clone()
    k_cache[:, :, slot] = k_t
    v_cache[:, :, slot] = v_t
    n = min(n_seen + 1, C)
    rep = q_t.shape[1] // k_cache.shape[1]
    q = q_t.float()
    k = k_cache[:, :, :n].float().repeat_interleave(rep, dim=1)
    v = v_cache[:, :, :n].float().repeat_interleave(rep, dim=1)
    scores = torch.einsum("bhd,bhnd->bhn", q, k) / math.sqrt(q.shape[-1])
    out = torch.einsum("bhn,bhnd->bhd", torch.softmax(scores, dim=-1), v)
    return out.to(q_t.dtype), k_cache, v_cache

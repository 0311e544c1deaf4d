# Groups the query heads as (B, H_kv, G, d) instead of expanding the cache, with einsum.
import math

import torch


def streaming_decode_step(q_t, k_t, v_t, k_cache, v_cache, n_seen, n_sink, window):
    B, H, d = q_t.shape
    H_kv, C = k_cache.shape[1], n_sink + window
    slot = n_seen if n_seen < n_sink else n_sink + (n_seen - n_sink) % window
    k_cache = torch.cat([k_cache[:, :, :slot], k_t[:, :, None], k_cache[:, :, slot + 1:]], dim=2)
    v_cache = torch.cat([v_cache[:, :, :slot], v_t[:, :, None], v_cache[:, :, slot + 1:]], dim=2)
    n = min(n_seen + 1, C)
    q = q_t.reshape(B, H_kv, H // H_kv, d)
    scores = torch.einsum("bkgd,bknd->bkgn", q, k_cache[:, :, :n]) / math.sqrt(d)
    out = torch.einsum("bkgn,bknd->bkgd", scores.softmax(dim=-1), v_cache[:, :, :n])
    return out.reshape(B, H, d), k_cache, v_cache

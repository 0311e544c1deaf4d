# Writes with index_copy (out of place) and gathers the visible tokens in time order: the sinks,
# then the window from its oldest token to the new one.
import math

import torch


def streaming_decode_step(q_t, k_t, v_t, k_cache, v_cache, n_seen, n_sink, window):
    C = n_sink + window

    def slot(t):
        return t if t < n_sink else n_sink + (t - n_sink) % window

    where = torch.tensor([slot(n_seen)], device=k_cache.device)
    k_cache = k_cache.index_copy(2, where, k_t.unsqueeze(2))
    v_cache = v_cache.index_copy(2, where, v_t.unsqueeze(2))
    tokens = list(range(min(n_sink, n_seen + 1))) + list(range(max(n_sink, n_seen - window + 1), n_seen + 1))
    idx = torch.tensor([slot(t) for t in tokens], device=k_cache.device)
    assert len(tokens) == min(n_seen + 1, C)
    k = k_cache.index_select(2, idx)                                    # (B, H_kv, n, d), oldest first
    v = v_cache.index_select(2, idx)
    H, H_kv = q_t.shape[1], k.shape[1]
    k = k.repeat_interleave(H // H_kv, dim=1)
    v = v.repeat_interleave(H // H_kv, dim=1)
    w = torch.softmax(torch.matmul(k, q_t.unsqueeze(-1)).squeeze(-1) * (1.0 / math.sqrt(q_t.shape[-1])), dim=-1)
    return torch.matmul(w.unsqueeze(-2), v).squeeze(-2), k_cache, v_cache

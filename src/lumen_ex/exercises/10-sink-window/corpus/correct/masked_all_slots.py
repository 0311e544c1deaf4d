# Attends over all C slots and masks the empty ones with -inf (a boolean mask on the slot axis).
import math

import torch


def streaming_decode_step(q_t, k_t, v_t, k_cache, v_cache, n_seen, n_sink, window):
    C = n_sink + window
    slot = n_seen if n_seen < C else n_sink + (n_seen - n_sink) % window
    onehot = torch.arange(C, device=q_t.device) == slot                     # (C,)
    k_cache = torch.where(onehot[:, None], k_t[:, :, None, :], k_cache)     # (B, H_kv, C, d)
    v_cache = torch.where(onehot[:, None], v_t[:, :, None, :], v_cache)
    group = q_t.shape[1] // k_cache.shape[1]
    k = k_cache.repeat_interleave(group, dim=1)
    v = v_cache.repeat_interleave(group, dim=1)
    scores = (q_t.unsqueeze(2) @ k.transpose(2, 3)).squeeze(2) / math.sqrt(q_t.shape[-1])   # (B, H, C)
    empty = torch.arange(C, device=q_t.device) > n_seen
    scores = scores.masked_fill(empty, float("-inf"))
    out = (torch.softmax(scores, dim=-1).unsqueeze(2) @ v).squeeze(2)
    return out, k_cache, v_cache

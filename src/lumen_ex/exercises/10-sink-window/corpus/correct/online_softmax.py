# Reads the occupied slots one at a time with an online softmax (running max and sum).
import math

import torch


def streaming_decode_step(q_t, k_t, v_t, k_cache, v_cache, n_seen, n_sink, window):
    B, H, d = q_t.shape
    C = k_cache.shape[2]
    ring = (n_seen - n_sink) % window
    slot = n_seen if n_seen < C else n_sink + ring
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    k_cache[:, :, slot] = k_t
    v_cache[:, :, slot] = v_t
    rep = H // k_cache.shape[1]
    m = torch.full((B, H, 1), float("-inf"), dtype=q_t.dtype, device=q_t.device)
    total = torch.zeros(B, H, 1, dtype=q_t.dtype, device=q_t.device)
    acc = torch.zeros_like(q_t)
    for j in range(min(n_seen + 1, C)):
        kj = k_cache[:, :, j].repeat_interleave(rep, dim=1)          # (B, H, d)
        vj = v_cache[:, :, j].repeat_interleave(rep, dim=1)
        s = (q_t * kj).sum(-1, keepdim=True) / math.sqrt(d)          # (B, H, 1)
        m_new = torch.maximum(m, s)
        fix = torch.exp(m - m_new)
        p = torch.exp(s - m_new)
        total = total * fix + p
        acc = acc * fix + p * vj
        m = m_new
    return acc / total, k_cache, v_cache

# bug: stores the new token's key in the value cache too (v_cache[..., slot] = k_t), a typo; the attention pattern is right, so the first test must show the value cache, not weights read through the wrong values
# expect-kind: values
# expect-test: test_attends_sinks_and_window

import math

import torch


def streaming_decode_step(q_t, k_t, v_t, k_cache, v_cache, n_seen, n_sink, window):
    B, H, d = q_t.shape
    H_kv = k_t.shape[1]
    C = k_cache.shape[2]
    g = H // H_kv
    slot = n_seen if n_seen < C else n_sink + (n_seen - n_sink) % window
    kc = k_cache.clone()
    vc = v_cache.clone()
    kc[:, :, slot] = k_t
    vc[:, :, slot] = k_t
    # time order: sinks, then the ring rotated so that the oldest window token comes first
    if n_seen >= C:
        shift = -((slot - n_sink + 1) % window)
        k_use = torch.cat([kc[:, :, :n_sink], torch.roll(kc[:, :, n_sink:], shifts=shift, dims=2)], dim=2)
        v_use = torch.cat([vc[:, :, :n_sink], torch.roll(vc[:, :, n_sink:], shifts=shift, dims=2)], dim=2)
    else:
        k_use, v_use = kc, vc
    occupied = torch.arange(C, device=q_t.device) < min(n_seen + 1, C)
    qg = q_t.view(B, H_kv, g, d) if q_t.is_contiguous() else q_t.reshape(B, H_kv, g, d)
    scores = torch.matmul(qg, k_use.transpose(-1, -2)) / math.sqrt(d)  # (B, H_kv, g, C)
    scores = scores.masked_fill(~occupied, float("-inf"))
    w = torch.softmax(scores, dim=-1)
    out = torch.matmul(w, v_use)  # (B, H_kv, g, d)
    return out.reshape(B, H, d), kc, vc

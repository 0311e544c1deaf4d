"""Reference for exercise 11: an int8 KV cache, quantized per token and per head.

Shapes: B batch, H query heads, H_kv key/value heads (H_kv divides H; query head h reads KV head
h // (H // H_kv)), T tokens already cached (T may be 0), d the width of one head.
Quantization is symmetric absmax over the last axis: scale = amax(|x|) / 127 (1 for a row of
zeros), codes = clamp(round_half_even(x / scale), -127, 127) as int8; x ~ codes * scale.
"""

from __future__ import annotations

import math

import torch


def quantize_kv(x):
    """x (..., d) float -> (x_q (..., d) int8, scale (..., 1) in x's dtype)."""
    amax = x.abs().amax(dim=-1, keepdim=True)                            # (..., 1)
    scale = torch.where(amax == 0, torch.ones_like(amax), amax / 127)    # (..., 1), x's dtype
    x_q = torch.clamp(torch.round(x / scale), -127, 127).to(torch.int8)  # (..., d), round half to even
    return x_q, scale


def dequantize(x_q, scale):
    """(..., d) int8 codes and (..., 1) scales -> (..., d) in the scales' dtype."""
    return x_q.to(scale.dtype) * scale                                   # (..., d)


def attend(q_t, k, v):
    """One query per head against every cached token: q_t (B, H, d), k, v (B, H_kv, L, d) -> (B, H, d)."""
    group = q_t.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)                                # (B, H, L, d)
    v = v.repeat_interleave(group, dim=1)                                # (B, H, L, d)
    scores = (q_t[:, :, None, :] @ k.transpose(-2, -1)) / math.sqrt(q_t.shape[-1])   # (B, H, 1, L)
    return (torch.softmax(scores, dim=-1) @ v)[:, :, 0, :]               # (B, H, d)


def int8_decode_step(q_t, k_q, k_scale, v_q, v_scale, k_t, v_t):
    """Quantize the new token's key and value, append them to the int8 caches, and attend from q_t
    to every cached token through the dequantized caches.

    q_t (B, H, d); k_q, v_q (B, H_kv, T, d) int8; k_scale, v_scale (B, H_kv, T, 1); k_t, v_t (B, H_kv, d).
    Returns out_t (B, H, d) and the grown caches: codes (B, H_kv, T + 1, d), scales (B, H_kv, T + 1, 1).
    The caller's tensors are left untouched (torch.cat makes new ones).
    """
    kq_new, ks_new = quantize_kv(k_t)                                    # (B, H_kv, d), (B, H_kv, 1)
    vq_new, vs_new = quantize_kv(v_t)
    k_q = torch.cat([k_q, kq_new[:, :, None, :]], dim=2)                 # (B, H_kv, T + 1, d) int8
    k_scale = torch.cat([k_scale, ks_new[:, :, None, :]], dim=2)         # (B, H_kv, T + 1, 1)
    v_q = torch.cat([v_q, vq_new[:, :, None, :]], dim=2)
    v_scale = torch.cat([v_scale, vs_new[:, :, None, :]], dim=2)
    out_t = attend(q_t, dequantize(k_q, k_scale), dequantize(v_q, v_scale))   # (B, H, d); the query is not quantized
    return out_t, k_q, k_scale, v_q, v_scale

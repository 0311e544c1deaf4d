# Multiplies by 127 / amax instead of dividing by the scale, and attends with einsum over the grouped heads
# without expanding the cache.
import math

import torch


def quantize_kv(x):
    amax = x.abs().amax(dim=-1, keepdim=True)
    safe = torch.where(amax > 0, amax, torch.ones_like(amax))
    scale = torch.where(amax > 0, amax / 127, torch.ones_like(amax))
    codes = torch.round(x * (127 / safe)).clamp(-127, 127)
    return codes.to(torch.int8), scale


def int8_decode_step(q_t, k_q, k_scale, v_q, v_scale, k_t, v_t):
    kn, ksn = quantize_kv(k_t)
    vn, vsn = quantize_kv(v_t)
    k_q = torch.cat([k_q, kn.unsqueeze(2)], dim=2)
    k_scale = torch.cat([k_scale, ksn.unsqueeze(2)], dim=2)
    v_q = torch.cat([v_q, vn.unsqueeze(2)], dim=2)
    v_scale = torch.cat([v_scale, vsn.unsqueeze(2)], dim=2)
    B, H, d = q_t.shape
    H_kv = k_q.shape[1]
    k = k_q.to(q_t.dtype) * k_scale
    v = v_q.to(q_t.dtype) * v_scale
    q = q_t.reshape(B, H_kv, H // H_kv, d)
    scores = torch.einsum("bkgd,bktd->bkgt", q, k) / math.sqrt(d)
    w = torch.softmax(scores, dim=-1)
    out = torch.einsum("bkgt,bktd->bkgd", w, v).reshape(B, H, d)
    return out, k_q, k_scale, v_q, v_scale

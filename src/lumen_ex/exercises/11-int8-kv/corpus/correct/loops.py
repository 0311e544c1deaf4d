# Loops over the batch and the heads, one token row at a time for the new entry, and over the query heads
# for the attention.
import math

import torch


def quantize_kv(x):
    amax = torch.amax(torch.abs(x), dim=-1, keepdim=True)
    scale = amax / 127
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    x_q = torch.round(x / scale)
    x_q = torch.clamp(x_q, -127, 127)
    return x_q.to(dtype=torch.int8), scale


def int8_decode_step(q_t, k_q, k_scale, v_q, v_scale, k_t, v_t):
    B, H, d = q_t.shape
    H_kv, T = k_q.shape[1], k_q.shape[2]
    nk_q = torch.empty(B, H_kv, T + 1, d, dtype=torch.int8, device=q_t.device)
    nv_q = torch.empty_like(nk_q)
    nk_s = torch.empty(B, H_kv, T + 1, 1, dtype=k_scale.dtype, device=q_t.device)
    nv_s = torch.empty_like(nk_s)
    nk_q[:, :, :T], nv_q[:, :, :T] = k_q, v_q
    nk_s[:, :, :T], nv_s[:, :, :T] = k_scale, v_scale
    for b in range(B):
        for h in range(H_kv):
            codes, s = quantize_kv(k_t[b, h])
            nk_q[b, h, T], nk_s[b, h, T] = codes, s
            codes, s = quantize_kv(v_t[b, h])
            nv_q[b, h, T], nv_s[b, h, T] = codes, s
    out = torch.empty_like(q_t)
    group = H // H_kv
    for b in range(B):
        for h in range(H):
            kv = h // group
            k = nk_q[b, kv].to(q_t.dtype) * nk_s[b, kv]             # (T+1, d)
            v = nv_q[b, kv].to(q_t.dtype) * nv_s[b, kv]
            w = torch.softmax(k @ q_t[b, h] / math.sqrt(d), dim=0)  # (T+1,)
            out[b, h] = w @ v
    return out, nk_q, nk_s, nv_q, nv_s

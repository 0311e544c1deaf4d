# expect-note: test_dtype[float64]
# Quantizes and attends in float32 whatever the inputs' dtype, and casts the scales and the output back.
import math

import torch


def quantize_kv(x):
    xf = x.float()
    amax = xf.abs().max(dim=-1, keepdim=True).values
    amax[amax == 0] = 127.0                      # a row of zeros: scale 1
    scale = amax / 127.0
    x_q = (xf / scale).round().clamp(min=-127, max=127).to(torch.int8)
    return x_q, scale.to(x.dtype)


def int8_decode_step(q_t, k_q, k_scale, v_q, v_scale, k_t, v_t):
    new_k, new_ks = quantize_kv(k_t)
    new_v, new_vs = quantize_kv(v_t)
    k_q = torch.cat((k_q, new_k[:, :, None]), dim=2)
    v_q = torch.cat((v_q, new_v[:, :, None]), dim=2)
    k_scale = torch.cat((k_scale, new_ks[:, :, None]), dim=2)
    v_scale = torch.cat((v_scale, new_vs[:, :, None]), dim=2)
    group = q_t.shape[1] // k_q.shape[1]
    k = (k_q.float() * k_scale.float()).repeat_interleave(group, dim=1)      # (B, H, T+1, d)
    v = (v_q.float() * v_scale.float()).repeat_interleave(group, dim=1)
    q = q_t.float()
    scores = (k @ q.unsqueeze(-1)).squeeze(-1) / math.sqrt(q.shape[-1])      # (B, H, T+1)
    p = torch.softmax(scores, dim=-1)
    out = (p.unsqueeze(-2) @ v).squeeze(-2)                                  # (B, H, d)
    return out.to(q_t.dtype), k_q, k_scale, v_q, v_scale

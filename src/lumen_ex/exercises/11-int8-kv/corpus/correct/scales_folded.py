# Never materialises the dequantized cache: the key scales multiply the scores (q . (c * s) = (q . c) * s)
# and the value scales multiply the weights before the product with the value codes.
import math

import torch


def quantize_kv(x):
    amax = x.abs().amax(-1, keepdim=True)
    scale = amax.div(127).masked_fill(amax == 0, 1)
    return x.div(scale).round().clamp(-127, 127).to(torch.int8), scale


def int8_decode_step(q_t, k_q, k_scale, v_q, v_scale, k_t, v_t):
    k_new, k_s = quantize_kv(k_t)
    v_new, v_s = quantize_kv(v_t)
    k_q = torch.cat([k_q, k_new[:, :, None, :]], 2)
    k_scale = torch.cat([k_scale, k_s[:, :, None, :]], 2)
    v_q = torch.cat([v_q, v_new[:, :, None, :]], 2)
    v_scale = torch.cat([v_scale, v_s[:, :, None, :]], 2)
    B, H, d = q_t.shape
    H_kv = k_q.shape[1]
    q = q_t.view(B, H_kv, H // H_kv, d) if q_t.is_contiguous() else q_t.reshape(B, H_kv, H // H_kv, d)
    dt = q_t.dtype
    raw = q @ k_q.to(dt).transpose(-2, -1)                            # (B, H_kv, g, T+1)
    scores = raw * k_scale.transpose(-2, -1) / math.sqrt(d)          # scale per key
    p = torch.softmax(scores, dim=-1) * v_scale.transpose(-2, -1)    # weights times each value's scale
    out = p @ v_q.to(dt)                                             # (B, H_kv, g, d)
    return out.reshape(B, H, d), k_q, k_scale, v_q, v_scale

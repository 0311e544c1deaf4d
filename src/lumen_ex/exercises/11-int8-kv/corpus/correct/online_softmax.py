# Dequantizes token by token and accumulates the attention with a running maximum and sum (as
# FlashAttention does), expanding the KV heads with index_select.
import math

import torch


def quantize_kv(x):
    amax = x.abs().amax(dim=-1, keepdim=True)
    zero = amax == 0
    scale = torch.where(zero, torch.ones_like(amax), amax / 127)
    q = torch.round(x / scale)
    q = torch.maximum(torch.minimum(q, torch.full_like(q, 127)), torch.full_like(q, -127))
    return q.to(torch.int8), scale


def int8_decode_step(q_t, k_q, k_scale, v_q, v_scale, k_t, v_t):
    kc, ks = quantize_kv(k_t)
    vc, vs = quantize_kv(v_t)
    k_q = torch.cat([k_q, kc.unsqueeze(-2)], dim=-2)
    v_q = torch.cat([v_q, vc.unsqueeze(-2)], dim=-2)
    k_scale = torch.cat([k_scale, ks.unsqueeze(-2)], dim=-2)
    v_scale = torch.cat([v_scale, vs.unsqueeze(-2)], dim=-2)
    B, H, d = q_t.shape
    H_kv = k_q.shape[1]
    heads = torch.arange(H, device=q_t.device) // (H // H_kv)
    m = torch.full((B, H), float("-inf"), dtype=q_t.dtype, device=q_t.device)
    s = torch.zeros(B, H, dtype=q_t.dtype, device=q_t.device)
    acc = torch.zeros_like(q_t)
    for t in range(k_q.shape[2]):
        k = (k_q[:, :, t].to(q_t.dtype) * k_scale[:, :, t]).index_select(1, heads)   # (B, H, d)
        v = (v_q[:, :, t].to(q_t.dtype) * v_scale[:, :, t]).index_select(1, heads)
        score = (q_t * k).sum(-1) / math.sqrt(d)                                      # (B, H)
        m_new = torch.maximum(m, score)
        fix = torch.exp(m - m_new)
        w = torch.exp(score - m_new)
        s = s * fix + w
        acc = acc * fix.unsqueeze(-1) + w.unsqueeze(-1) * v
        m = m_new
    return acc / s.unsqueeze(-1), k_q, k_scale, v_q, v_scale

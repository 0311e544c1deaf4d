"""Correct: everything computed in float64, results cast back to the inputs' dtype."""

import math

import torch


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    dtype = x_t.dtype
    x, kc, vc = x_t.double(), k_cache.double(), v_cache.double()
    wq, wk, wv, wo = w_q.double(), w_k.double(), w_v.double(), w_o.double()
    B, n_kv_heads, T, d_head = kc.shape
    q = (x @ wq).view(B, n_heads, 1, d_head)                  # (B, H, 1, d_head)
    k_new = (x @ wk).view(B, n_kv_heads, 1, d_head)           # (B, H_kv, 1, d_head)
    v_new = (x @ wv).view(B, n_kv_heads, 1, d_head)
    kc = torch.cat((kc, k_new), dim=-2)                       # (B, H_kv, T + 1, d_head)
    vc = torch.cat((vc, v_new), dim=-2)
    group = n_heads // n_kv_heads
    k = kc.repeat_interleave(group, dim=1)                    # (B, H, T + 1, d_head)
    v = vc.repeat_interleave(group, dim=1)
    w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d_head), dim=-1)   # (B, H, 1, T + 1)
    out = (w @ v).reshape(B, n_heads * d_head)                # (B, H * d_head)
    y_t = out @ wo                                            # (B, d_model)
    return y_t.to(dtype), kc.to(dtype), vc.to(dtype)

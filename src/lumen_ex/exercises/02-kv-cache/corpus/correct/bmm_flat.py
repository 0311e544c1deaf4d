"""Correct: batch and heads flattened together, torch.bmm and F.softmax, caches grown with F.pad."""

import math

import torch
import torch.nn.functional as F


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv_heads, T, d_head = k_cache.shape
    k_new = torch.mm(x_t, w_k).reshape(B, n_kv_heads, 1, d_head)    # (B, H_kv, 1, d_head)
    v_new = torch.mm(x_t, w_v).reshape(B, n_kv_heads, 1, d_head)
    # One more time step, zero at first, then the new entry written into a fresh tensor.
    k_all = F.pad(k_cache, (0, 0, 0, 1))                            # (B, H_kv, T + 1, d_head)
    v_all = F.pad(v_cache, (0, 0, 0, 1))
    k_all[:, :, -1:] = k_new
    v_all[:, :, -1:] = v_new
    rep = n_heads // n_kv_heads
    k = k_all.repeat_interleave(rep, 1).reshape(B * n_heads, T + 1, d_head)   # (B*H, T + 1, d_head)
    v = v_all.repeat_interleave(rep, 1).reshape(B * n_heads, T + 1, d_head)
    q = torch.mm(x_t, w_q).reshape(B * n_heads, 1, d_head)                    # (B*H, 1, d_head)
    w = F.softmax(torch.bmm(q, k.transpose(1, 2)) / math.sqrt(d_head), dim=2)  # (B*H, 1, T + 1)
    out = torch.bmm(w, v).reshape(B, n_heads * d_head)                        # (B, H * d_head)
    return torch.mm(out, w_o), k_all, v_all

# bug: subtracts the largest cached score for stability, which fails when the cache is empty (T = 0)
# expect-kind: exception
import math

import torch


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv_heads, T, d_head = k_cache.shape
    group = n_heads // n_kv_heads
    q = (x_t @ w_q).reshape(B, n_heads, 1, d_head)
    k_new = (x_t @ w_k).reshape(B, n_kv_heads, 1, d_head)
    v_new = (x_t @ w_v).reshape(B, n_kv_heads, 1, d_head)
    old = q @ k_cache.repeat_interleave(group, dim=1).transpose(-2, -1) / math.sqrt(d_head)   # (B, H, 1, T)
    new = q @ k_new.repeat_interleave(group, dim=1).transpose(-2, -1) / math.sqrt(d_head)     # (B, H, 1, 1)
    top = torch.maximum(old.max(dim=-1, keepdim=True).values, new)
    e_old, e_new = (old - top).exp(), (new - top).exp()
    total = e_old.sum(-1, keepdim=True) + e_new
    out = (e_old @ v_cache.repeat_interleave(group, dim=1) + e_new * v_new.repeat_interleave(group, dim=1)) / total
    k_cache = torch.cat([k_cache, k_new], dim=2)
    v_cache = torch.cat([v_cache, v_new], dim=2)
    return out.reshape(B, -1) @ w_o, k_cache, v_cache

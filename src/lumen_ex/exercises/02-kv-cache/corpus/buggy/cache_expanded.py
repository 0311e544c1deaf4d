# bug: stores the caches expanded to n_heads (B, n_heads, T+1, d_head) instead of n_kv_heads
# expect-kind: shape
# expect-misconception: cache-expanded
import math

import torch


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv_heads, T, d_head = k_cache.shape
    group = n_heads // n_kv_heads
    q = (x_t @ w_q).reshape(B, n_heads, 1, d_head)
    k_new = (x_t @ w_k).reshape(B, n_kv_heads, 1, d_head)
    v_new = (x_t @ w_v).reshape(B, n_kv_heads, 1, d_head)
    k = torch.cat([k_cache, k_new], dim=2).repeat_interleave(group, dim=1)   # (B, H, T + 1, d_head)
    v = torch.cat([v_cache, v_new], dim=2).repeat_interleave(group, dim=1)
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head), dim=-1)
    return (w @ v).reshape(B, -1) @ w_o, k, v

# bug: expands the KV heads with repeat (tiling 0,1,0,1,...) instead of repeat_interleave (0,0,0,1,1,1)
# expect-kind: values
# expect-misconception: gqa-repeat
import math

import torch


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv_heads, T, d_head = k_cache.shape
    q = (x_t @ w_q).reshape(B, n_heads, 1, d_head)
    k_cache = torch.cat([k_cache, (x_t @ w_k).reshape(B, n_kv_heads, 1, d_head)], dim=2)
    v_cache = torch.cat([v_cache, (x_t @ w_v).reshape(B, n_kv_heads, 1, d_head)], dim=2)
    group = n_heads // n_kv_heads
    k = k_cache.repeat(1, group, 1, 1)                                 # (B, H, T + 1, d_head), tiled
    v = v_cache.repeat(1, group, 1, 1)
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head), dim=-1)
    return (w @ v).reshape(B, -1) @ w_o, k_cache, v_cache

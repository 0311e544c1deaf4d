# bug: correct values, but attends over every prefix of the cache in a loop and keeps the last: O(T^2) work per step
# expect-kind: property
# expect-misconception: quadratic-cost
import math

import torch


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv_heads, T, d_head = k_cache.shape
    q = (x_t @ w_q).reshape(B, n_heads, 1, d_head)
    k_cache = torch.cat([k_cache, (x_t @ w_k).reshape(B, n_kv_heads, 1, d_head)], dim=2)
    v_cache = torch.cat([v_cache, (x_t @ w_v).reshape(B, n_kv_heads, 1, d_head)], dim=2)
    group = n_heads // n_kv_heads
    k = k_cache.repeat_interleave(group, dim=1)                        # (B, H, T + 1, d_head)
    v = v_cache.repeat_interleave(group, dim=1)
    for t in range(T + 1):   # "build the answer up token by token"; only the last pass matters
        w = torch.softmax(q @ k[:, :, : t + 1].transpose(-2, -1) / math.sqrt(d_head), dim=-1)
        out = w @ v[:, :, : t + 1]                                     # (B, H, 1, d_head)
    return out.reshape(B, -1) @ w_o, k_cache, v_cache

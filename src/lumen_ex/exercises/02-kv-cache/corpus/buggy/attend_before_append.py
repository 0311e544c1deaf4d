# bug: attends over the old cache before appending the new key and value, so the token never sees itself
# expect-kind: values
# expect-misconception: attend-before-append
import math

import torch


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv_heads, T, d_head = k_cache.shape
    q = (x_t @ w_q).reshape(B, n_heads, 1, d_head)                     # (B, H, 1, d_head)
    group = n_heads // n_kv_heads
    k = k_cache.repeat_interleave(group, dim=1)                        # (B, H, T, d_head)
    v = v_cache.repeat_interleave(group, dim=1)
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head), dim=-1)   # (B, H, 1, T)
    y_t = (w @ v).reshape(B, -1) @ w_o                                 # (B, d_model)
    k_cache = torch.cat([k_cache, (x_t @ w_k).reshape(B, n_kv_heads, 1, d_head)], dim=2)
    v_cache = torch.cat([v_cache, (x_t @ w_v).reshape(B, n_kv_heads, 1, d_head)], dim=2)
    return y_t, k_cache, v_cache

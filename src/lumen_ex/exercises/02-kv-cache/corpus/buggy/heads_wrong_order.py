# bug: splits the projections into heads as (B, d_head, n) and transposes, instead of (B, n, d_head)
# expect-kind: values
# expect-misconception: heads-split-wrong-order
import math

import torch


def split(x, n):
    B, width = x.shape
    return x.view(B, width // n, n).transpose(1, 2).unsqueeze(2)      # (B, n, 1, d_head), wrong grouping


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv_heads, T, d_head = k_cache.shape
    q, k_new, v_new = split(x_t @ w_q, n_heads), split(x_t @ w_k, n_kv_heads), split(x_t @ w_v, n_kv_heads)
    k_cache = torch.cat([k_cache, k_new], dim=2)
    v_cache = torch.cat([v_cache, v_new], dim=2)
    group = n_heads // n_kv_heads
    k = k_cache.repeat_interleave(group, dim=1)
    v = v_cache.repeat_interleave(group, dim=1)
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head), dim=-1)
    return (w @ v).reshape(B, -1) @ w_o, k_cache, v_cache

# bug: grows the caller's cache tensors in place with .data = ..., so the caller's k_cache changes too
# expect-kind: side-effect
# expect-misconception: caller-cache-mutated
import math

import torch


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv_heads, T, d_head = k_cache.shape
    q = (x_t @ w_q).reshape(B, n_heads, 1, d_head)
    # "Update the cache in place so nobody has to copy it": rebinds the caller's tensors.
    k_cache.data = torch.cat([k_cache, (x_t @ w_k).reshape(B, n_kv_heads, 1, d_head)], dim=2)
    v_cache.data = torch.cat([v_cache, (x_t @ w_v).reshape(B, n_kv_heads, 1, d_head)], dim=2)
    group = n_heads // n_kv_heads
    k = k_cache.repeat_interleave(group, dim=1)
    v = v_cache.repeat_interleave(group, dim=1)
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head), dim=-1)
    return (w @ v).reshape(B, -1) @ w_o, k_cache, v_cache

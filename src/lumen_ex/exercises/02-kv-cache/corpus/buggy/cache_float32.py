# bug: allocates the grown caches with torch.zeros(...) and no dtype=, so they are always float32
# expect-kind: dtype
# expect-misconception: new-tensor-dtype
# expect-test: test_dtype[float64]
import math

import torch


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv_heads, T, d_head = k_cache.shape
    new_k = torch.zeros(B, n_kv_heads, T + 1, d_head, device=k_cache.device)
    new_v = torch.zeros(B, n_kv_heads, T + 1, d_head, device=v_cache.device)
    new_k[:, :, :T], new_v[:, :, :T] = k_cache, v_cache
    new_k[:, :, T] = (x_t @ w_k).reshape(B, n_kv_heads, d_head)
    new_v[:, :, T] = (x_t @ w_v).reshape(B, n_kv_heads, d_head)
    q = (x_t @ w_q).reshape(B, n_heads, 1, d_head)
    group = n_heads // n_kv_heads
    k = new_k.to(q.dtype).repeat_interleave(group, dim=1)
    v = new_v.to(q.dtype).repeat_interleave(group, dim=1)
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head), dim=-1)
    return (w @ v).reshape(B, -1) @ w_o, new_k, new_v

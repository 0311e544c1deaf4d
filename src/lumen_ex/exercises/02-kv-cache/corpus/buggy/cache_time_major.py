# bug: works on the caches time-major, (B, T, n_kv_heads, d_head), and returns them that way
# expect-kind: shape
# expect-misconception: axes-transposed
import math

import torch


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv_heads, T, d_head = k_cache.shape
    group = n_heads // n_kv_heads
    q = (x_t @ w_q).reshape(B, n_heads, 1, d_head)
    k_seq = torch.cat([k_cache.transpose(1, 2), (x_t @ w_k).reshape(B, 1, n_kv_heads, d_head)], dim=1)
    v_seq = torch.cat([v_cache.transpose(1, 2), (x_t @ w_v).reshape(B, 1, n_kv_heads, d_head)], dim=1)
    k = k_seq.transpose(1, 2).repeat_interleave(group, dim=1)          # (B, H, T + 1, d_head)
    v = v_seq.transpose(1, 2).repeat_interleave(group, dim=1)
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head), dim=-1)
    return (w @ v).reshape(B, -1) @ w_o, k_seq, v_seq                   # caches (B, T + 1, H_kv, d_head)

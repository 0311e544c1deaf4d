# bug: splits the projections into heads as (B, d_head, n) then transposes, and merges back with the inverse transpose
# expect-kind: values
# expect-misconception: heads-split-and-merged-wrong-order
import math

import torch


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv_heads, T, d_head = k_cache.shape
    group = n_heads // n_kv_heads
    q = (x_t @ w_q).reshape(B, d_head, n_heads).transpose(1, 2)[:, :, None]         # (B, H, 1, d_head)
    k_new = (x_t @ w_k).reshape(B, d_head, n_kv_heads).transpose(1, 2)[:, :, None]
    v_new = (x_t @ w_v).reshape(B, d_head, n_kv_heads).transpose(1, 2)[:, :, None]
    k_cache = torch.cat([k_cache, k_new], dim=2)
    v_cache = torch.cat([v_cache, v_new], dim=2)
    k = k_cache.repeat_interleave(group, dim=1)
    v = v_cache.repeat_interleave(group, dim=1)
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head), dim=-1)
    out = (w @ v)[:, :, 0].transpose(1, 2).reshape(B, -1)                        # (B, d_head * H)
    return out @ w_o, k_cache, v_cache

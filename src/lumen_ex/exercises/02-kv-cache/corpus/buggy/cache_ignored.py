# bug: attends only to the new token's own key and value; the cache is appended to but never read
# expect-kind: values
# expect-misconception: cache-ignored
import math

import torch


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv_heads, T, d_head = k_cache.shape
    q = (x_t @ w_q).reshape(B, n_heads, 1, d_head)                     # (B, H, 1, d_head)
    k_new = (x_t @ w_k).reshape(B, n_kv_heads, 1, d_head)              # (B, H_kv, 1, d_head)
    v_new = (x_t @ w_v).reshape(B, n_kv_heads, 1, d_head)
    group = n_heads // n_kv_heads
    k = k_new.repeat_interleave(group, dim=1)                          # (B, H, 1, d_head)
    v = v_new.repeat_interleave(group, dim=1)
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head), dim=-1)   # (B, H, 1, 1)
    y_t = (w @ v).reshape(B, -1) @ w_o                                 # (B, d_model)
    return y_t, torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)

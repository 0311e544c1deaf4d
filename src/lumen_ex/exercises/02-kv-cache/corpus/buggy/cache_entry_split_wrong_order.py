# bug: attends with correctly split heads, but stores the new cache entry reshaped as (B, d_head, n_kv_heads) and transposed
# expect-kind: values
# expect-misconception: new-entry-split-wrong-order
import math

import torch


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    B, n_kv_heads, T, d_head = k_cache.shape
    group = n_heads // n_kv_heads
    q = (x_t @ w_q).reshape(B, n_heads, 1, d_head)
    k_new = (x_t @ w_k).reshape(B, n_kv_heads, 1, d_head)
    v_new = (x_t @ w_v).reshape(B, n_kv_heads, 1, d_head)
    k = torch.cat([k_cache, k_new], dim=2).repeat_interleave(group, dim=1)
    v = torch.cat([v_cache, v_new], dim=2).repeat_interleave(group, dim=1)
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head), dim=-1)
    # "store" the new entry: a second reshape, written from memory
    k_store = (x_t @ w_k).reshape(B, d_head, n_kv_heads).transpose(1, 2)[:, :, None]
    v_store = (x_t @ w_v).reshape(B, d_head, n_kv_heads).transpose(1, 2)[:, :, None]
    return (w @ v).reshape(B, -1) @ w_o, torch.cat([k_cache, k_store], dim=2), torch.cat([v_cache, v_store], dim=2)

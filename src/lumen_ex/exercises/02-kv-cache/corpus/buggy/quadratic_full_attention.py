# bug: correct values, but each step rebuilds a full (T+1) x (T+1) causal score matrix and keeps the last row
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
    # Reuse full causal attention: earlier queries are not known, so pad them with zeros.
    q_all = torch.cat([torch.zeros_like(k[:, :, :T]), q], dim=2)       # (B, H, T + 1, d_head)
    scores = q_all @ k.transpose(-2, -1) / math.sqrt(d_head)          # (B, H, T + 1, T + 1)
    causal = torch.ones(T + 1, T + 1, dtype=torch.bool, device=x_t.device).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v                            # (B, H, T + 1, d_head)
    return out[:, :, -1].reshape(B, -1) @ w_o, k_cache, v_cache

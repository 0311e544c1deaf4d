# bug: returns the projections x @ w_k and x @ w_v themselves, (B, L, n_kv_heads * d_head), as the caches
# expect-kind: shape
# expect-misconception: cache-not-split
import math

import torch


def prefill(x, w_q, w_k, w_v, w_o, n_heads):
    B, L, _ = x.shape
    d_head = w_q.shape[1] // n_heads
    n_kv = w_k.shape[1] // d_head
    keys, values = x @ w_k, x @ w_v
    q = (x @ w_q).reshape(B, L, n_heads, d_head).transpose(1, 2)
    k = keys.reshape(B, L, n_kv, d_head).transpose(1, 2).repeat_interleave(n_heads // n_kv, dim=1)
    v = values.reshape(B, L, n_kv, d_head).transpose(1, 2).repeat_interleave(n_heads // n_kv, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)
    mask = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
    w = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return (w @ v).transpose(1, 2).reshape(B, L, -1) @ w_o, keys, values

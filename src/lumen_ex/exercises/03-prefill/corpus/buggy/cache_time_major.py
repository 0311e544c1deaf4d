# bug: returns the caches as they are right after the head split, (B, L, n_kv_heads, d_head), and transposes only for the attention
# expect-kind: shape
# expect-misconception: cache-time-major
import math

import torch


def prefill(x, w_q, w_k, w_v, w_o, n_heads):
    B, L, _ = x.shape
    d_head = w_q.shape[1] // n_heads
    n_kv = w_k.shape[1] // d_head
    q = (x @ w_q).view(B, L, n_heads, d_head)
    k = (x @ w_k).view(B, L, n_kv, d_head)
    v = (x @ w_v).view(B, L, n_kv, d_head)
    kk = k.transpose(1, 2).repeat_interleave(n_heads // n_kv, dim=1)
    vv = v.transpose(1, 2).repeat_interleave(n_heads // n_kv, dim=1)
    scores = q.transpose(1, 2) @ kk.transpose(-2, -1) / math.sqrt(d_head)
    mask = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
    w = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return (w @ vv).transpose(1, 2).reshape(B, L, -1) @ w_o, k, v

# bug: returns the caches expanded to n_heads (B, n_heads, L, d_head), as used in the attention, instead of n_kv_heads
# expect-kind: shape
# expect-misconception: cache-expanded
import math

import torch


def prefill(x, w_q, w_k, w_v, w_o, n_heads):
    B, L, _ = x.shape
    d_head = w_q.shape[1] // n_heads
    n_kv = w_k.shape[1] // d_head
    q = (x @ w_q).reshape(B, L, n_heads, d_head).transpose(1, 2)
    k = (x @ w_k).reshape(B, L, n_kv, d_head).transpose(1, 2).repeat_interleave(n_heads // n_kv, dim=1)
    v = (x @ w_v).reshape(B, L, n_kv, d_head).transpose(1, 2).repeat_interleave(n_heads // n_kv, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)
    mask = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
    w = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return (w @ v).transpose(1, 2).reshape(B, L, -1) @ w_o, k, v

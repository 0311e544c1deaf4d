# bug: merges the heads with .view(B, L, -1) right after a transpose: the memory is not laid out for it and torch raises
# expect-kind: exception
# expect-misconception: view-not-reshape
# expect-test: test_returns_three_tensors
import math

import torch


def prefill(x, w_q, w_k, w_v, w_o, n_heads):
    B, L, _ = x.shape
    d_head = w_q.shape[1] // n_heads
    n_kv = w_k.shape[1] // d_head
    q = (x @ w_q).view(B, L, n_heads, d_head).transpose(1, 2)
    k = (x @ w_k).view(B, L, n_kv, d_head).transpose(1, 2)
    v = (x @ w_v).view(B, L, n_kv, d_head).transpose(1, 2)
    kk = k.repeat_interleave(n_heads // n_kv, dim=1)
    vv = v.repeat_interleave(n_heads // n_kv, dim=1)
    scores = q @ kk.transpose(-2, -1) / math.sqrt(d_head)
    mask = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
    w = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return (w @ vv).transpose(1, 2).view(B, L, -1) @ w_o, k, v

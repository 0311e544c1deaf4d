# bug: splits every projection into heads as (B, L, d_head, n) and permutes, instead of (B, L, n, d_head)
# expect-kind: values
# expect-misconception: heads-split-wrong-order
import math

import torch


def heads(t, n):
    B, L, width = t.shape
    return t.reshape(B, L, width // n, n).permute(0, 3, 1, 2)     # (B, n, L, d_head), wrong columns


def prefill(x, w_q, w_k, w_v, w_o, n_heads):
    B, L, _ = x.shape
    d_head = w_q.shape[1] // n_heads
    n_kv = w_k.shape[1] // d_head
    q, k, v = heads(x @ w_q, n_heads), heads(x @ w_k, n_kv), heads(x @ w_v, n_kv)
    kk = k.repeat_interleave(n_heads // n_kv, dim=1)
    vv = v.repeat_interleave(n_heads // n_kv, dim=1)
    mask = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
    w = torch.softmax((q @ kk.transpose(-2, -1) / math.sqrt(d_head)).masked_fill(~mask, float("-inf")), dim=-1)
    return (w @ vv).transpose(1, 2).reshape(B, L, -1) @ w_o, k, v

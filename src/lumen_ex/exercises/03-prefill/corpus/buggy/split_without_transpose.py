# bug: splits the heads with a straight reshape to (B, n_heads, L, d_head), no transpose: right shape, tokens' features mixed
# expect-kind: values
# expect-misconception: heads-split-without-transpose
import math

import torch


def prefill(x, w_q, w_k, w_v, w_o, n_heads):
    B, L, _ = x.shape
    d_head = w_q.shape[1] // n_heads
    n_kv = w_k.shape[1] // d_head
    q = (x @ w_q).reshape(B, n_heads, L, d_head)
    k = (x @ w_k).reshape(B, n_kv, L, d_head)
    v = (x @ w_v).reshape(B, n_kv, L, d_head)
    kk = k.repeat_interleave(n_heads // n_kv, dim=1)
    vv = v.repeat_interleave(n_heads // n_kv, dim=1)
    scores = q @ kk.transpose(-2, -1) / math.sqrt(d_head)
    mask = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
    w = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return (w @ vv).transpose(1, 2).reshape(B, L, -1) @ w_o, k, v

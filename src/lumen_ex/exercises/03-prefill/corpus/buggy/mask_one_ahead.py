# bug: an off-by-one in the mask, triu(diagonal=2) for the hidden part instead of triu(diagonal=1): token i also sees token i+1
# expect-kind: values
# expect-misconception: causal-one-ahead
import math

import torch


def prefill(x, w_q, w_k, w_v, w_o, n_heads):
    B, L, _ = x.shape
    d_head = w_q.shape[1] // n_heads
    n_kv = w_k.shape[1] // d_head
    q = (x @ w_q).reshape(B, L, n_heads, d_head).transpose(1, 2)
    k = (x @ w_k).reshape(B, L, n_kv, d_head).transpose(1, 2)
    v = (x @ w_v).reshape(B, L, n_kv, d_head).transpose(1, 2)
    kk = k.repeat_interleave(n_heads // n_kv, dim=1)
    vv = v.repeat_interleave(n_heads // n_kv, dim=1)
    scores = q @ kk.transpose(-2, -1) / math.sqrt(d_head)
    hidden = torch.ones(L, L, dtype=torch.bool, device=x.device).triu(diagonal=2)
    w = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1)
    return (w @ vv).transpose(1, 2).reshape(B, L, -1) @ w_o, k, v

# bug: adds a causal bias of -100 instead of -inf ("small enough"): a later token whose score is above about 100 still gets weight
# expect-kind: property
# expect-misconception: future-leak
# expect-test: test_no_future_leakage
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
    bias = torch.triu(torch.full((L, L), -100.0, dtype=x.dtype, device=x.device), diagonal=1)
    w = torch.softmax(q @ kk.transpose(-2, -1) / math.sqrt(d_head) + bias, dim=-1)
    return (w @ vv).transpose(1, 2).reshape(B, L, -1) @ w_o, k, v

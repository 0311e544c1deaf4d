# bug: exp(scores - the row's max over every key), then zeroes the later tokens and renormalises: a later token with a huge score underflows every allowed weight to 0, and the row becomes 0/0 = NaN (the future leaks in)
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
    k2 = k.repeat_interleave(n_heads // n_kv, dim=1)
    v2 = v.repeat_interleave(n_heads // n_kv, dim=1)
    s = (q @ k2.transpose(-2, -1)) / math.sqrt(d_head)
    lower = torch.ones_like(s[0, 0]).tril()                         # (L, L), the inputs' dtype and device
    e = torch.exp(s - s.amax(dim=-1, keepdim=True)) * lower        # the max over every key, later ones too
    w = e / e.sum(dim=-1, keepdim=True)
    return (w @ v2).transpose(1, 2).reshape(B, L, -1) @ w_o, k, v

# expect-note: test_dtype[float64]
"""Everything in float32, then cast back to the inputs' dtype (as mixed-precision code does)."""

import math

import torch


def attention_backward(q, k, v, d_out, causal=False):
    dtype = q.dtype
    q32, k32, v32, g32 = q.float(), k.float(), v.float(), d_out.float()
    d = q.shape[-1]
    scores = q32 @ k32.mT / math.sqrt(d)
    if causal:
        L_q, L_k = q.shape[-2], k.shape[-2]
        future = torch.ones(L_q, L_k, dtype=torch.bool, device=q.device).triu(L_k - L_q + 1)
        scores = scores.masked_fill(future, float("-inf"))
    p = scores.softmax(dim=-1)
    dv = p.mT @ g32
    dp = g32 @ v32.mT
    ds = p * dp
    ds = ds - p * ds.sum(dim=-1, keepdim=True)
    dq = ds @ k32 / math.sqrt(d)
    dk = ds.mT @ q32 / math.sqrt(d)
    return dq.to(dtype), dk.to(dtype), dv.to(dtype)

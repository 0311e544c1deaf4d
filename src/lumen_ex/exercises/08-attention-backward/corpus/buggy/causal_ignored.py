# bug: the causal flag is accepted but never used
# expect-kind: values
# expect-misconception: causal-ignored
# expect-test: test_causal[rectangular]

import math

import torch


def attention_backward(q, k, v, d_out, causal=False):
    scale = 1 / math.sqrt(q.size(-1))
    p = torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1)
    dv = p.transpose(-2, -1) @ d_out
    dp = d_out @ v.transpose(-2, -1)
    ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))
    dq = ds @ k * scale
    dk = ds.transpose(-2, -1) @ q * scale
    return dq, dk, dv

"""Every product written as an einsum, the leading axes as '...'."""

import math

import torch


def attention_backward(q, k, v, d_out, causal=False):
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = torch.einsum("...id,...jd->...ij", q, k) * scale
    if causal:
        L_q, L_k = q.shape[-2], k.shape[-2]
        i = torch.arange(L_q, device=q.device).unsqueeze(1)
        j = torch.arange(L_k, device=q.device).unsqueeze(0)
        s = s.masked_fill(j > i + (L_k - L_q), float("-inf"))
    p = torch.softmax(s, dim=-1)
    dv = torch.einsum("...ij,...id->...jd", p, d_out)
    dp = torch.einsum("...id,...jd->...ij", d_out, v)
    ds = p * (dp - torch.einsum("...ij,...ij->...i", dp, p).unsqueeze(-1))
    dq = torch.einsum("...ij,...jd->...id", ds, k) * scale
    dk = torch.einsum("...ij,...id->...jd", ds, q) * scale
    return dq, dk, dv

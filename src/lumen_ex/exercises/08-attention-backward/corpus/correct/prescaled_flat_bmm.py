"""q scaled once up front, the leading axes flattened into one batch for torch.bmm."""

import math

import torch


def attention_backward(q, k, v, d_out, causal=False):
    lead = q.shape[:-2]
    L_q, d_k = q.shape[-2:]
    L_k, d_v = v.shape[-2:]
    qs = (q / math.sqrt(d_k)).reshape(-1, L_q, d_k)
    k3 = k.reshape(-1, L_k, d_k)
    v3 = v.reshape(-1, L_k, d_v)
    g3 = d_out.reshape(-1, L_q, d_v)
    scores = torch.bmm(qs, k3.transpose(1, 2))
    if causal:
        allowed = torch.arange(L_k, device=q.device)[None, :] <= torch.arange(L_q, device=q.device)[:, None] + (L_k - L_q)
        scores = scores.masked_fill(~allowed, float("-inf"))
    p = torch.softmax(scores, dim=-1)
    dv = torch.bmm(p.transpose(1, 2), g3)
    dp = torch.bmm(g3, v3.transpose(1, 2))
    ds = p * (dp - (p * dp).sum(-1, keepdim=True))
    dq = torch.bmm(ds, k3) / math.sqrt(d_k)
    dk = torch.bmm(ds.transpose(1, 2), qs)             # qs already holds the 1/sqrt(d_k)
    return dq.reshape(*lead, L_q, d_k), dk.reshape(*lead, L_k, d_k), dv.reshape(*lead, L_k, d_v)

"""Correct: one loop only, over key blocks, with every query processed at once against each block
(scores (..., L_q, b_k): linear in L). With causal=True a key block is given only the queries that
can see some of it, so the work still halves."""

import math

import torch


def flash_attention(q, k, v, causal=False, block_size=64):
    work = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    L_q, L_k = q.shape[-2], k.shape[-2]
    off = L_k - L_q
    qs = q.to(work) * (1.0 / math.sqrt(q.shape[-1]))
    m = torch.full(q.shape[:-1], float("-inf"), dtype=work, device=q.device)
    l = torch.zeros(q.shape[:-1], dtype=work, device=q.device)
    o = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=work, device=q.device)
    for j0 in range(0, L_k, block_size):
        j1 = min(j0 + block_size, L_k)
        first = max(0, j0 - off) if causal else 0       # earlier queries see nothing of this block
        if first >= L_q:
            break
        s = qs[..., first:, :] @ k[..., j0:j1, :].to(work).transpose(-2, -1)
        if causal:
            qpos = torch.arange(first, L_q, device=q.device)[:, None] + off
            s = s.masked_fill(torch.arange(j0, j1, device=q.device)[None, :] > qpos, float("-inf"))
        mo = m[..., first:]
        mn = torch.maximum(mo, s.amax(-1))
        p = torch.exp(s - mn[..., None])
        r = torch.exp(mo - mn)
        l = torch.cat([l[..., :first], l[..., first:] * r + p.sum(-1)], dim=-1)
        o = torch.cat([o[..., :first, :], o[..., first:, :] * r[..., None] + p @ v[..., j0:j1, :].to(work)], dim=-2)
        m = torch.cat([m[..., :first], mn], dim=-1)
    return (o / l[..., None]).to(q.dtype), m + torch.log(l)

"""Correct: no separate maximum and sum; the running lse itself is carried and merged with each
block's logsumexp by torch.logaddexp, and the normalised output is reweighted by exp(lse_old - lse_new)."""

import math

import torch


def flash_attention(q, k, v, causal=False, block_size=64):
    dt = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    n_q, n_k = q.shape[-2], k.shape[-2]
    delta = n_k - n_q
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
    lse_all = torch.empty(q.shape[:-1], dtype=dt, device=q.device)
    for a in range(0, n_q, block_size):
        b = min(a + block_size, n_q)
        qa = q[..., a:b, :].to(dt) / math.sqrt(q.shape[-1])
        run = torch.full(qa.shape[:-1], float("-inf"), dtype=dt, device=q.device)     # running lse
        o = torch.zeros(*qa.shape[:-1], v.shape[-1], dtype=dt, device=q.device)       # normalised output
        for c in range(0, n_k, block_size):
            if causal and c > b - 1 + delta:
                break
            d = min(c + block_size, n_k)
            s = qa @ k[..., c:d, :].to(dt).transpose(-1, -2)
            if causal and d - 1 > a + delta:
                hide = torch.arange(c, d, device=q.device).view(1, -1) > torch.arange(a, b, device=q.device).view(-1, 1) + delta
                s = s.masked_fill(hide, float("-inf"))
            blk = torch.logsumexp(s, dim=-1)                      # -inf for a row that sees none of this block
            new = torch.logaddexp(run, blk)
            keep = torch.exp(run - new)                           # exp(-inf) = 0 at the start
            w = torch.exp(s - new[..., None])
            o = o * keep[..., None] + w @ v[..., c:d, :].to(dt)
            run = new
        out[..., a:b, :] = o.to(q.dtype)
        lse_all[..., a:b] = run
    return out, lse_all

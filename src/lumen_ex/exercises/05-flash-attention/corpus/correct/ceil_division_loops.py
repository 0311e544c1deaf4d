"""Correct: two nested loops over block indices found by ceil division, the output and lse written
into preallocated tensors; the running sum and output rescaled by exp(m_old - m_new)."""

import math

import torch


def flash_attention(q, k, v, causal=False, block_size=64):
    L_q, d_k = q.shape[-2], q.shape[-1]
    L_k, d_v = k.shape[-2], v.shape[-1]
    work = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    n_q = (L_q + block_size - 1) // block_size
    n_k = (L_k + block_size - 1) // block_size
    out = torch.zeros(*q.shape[:-1], d_v, dtype=q.dtype, device=q.device)
    lse = torch.zeros(q.shape[:-1], dtype=work, device=q.device)
    shift = L_k - L_q
    for bi in range(n_q):
        qs, qe = bi * block_size, min((bi + 1) * block_size, L_q)
        qb = q[..., qs:qe, :].to(work)
        m = torch.full(qb.shape[:-1], float("-inf"), dtype=work, device=q.device)
        l = torch.zeros(qb.shape[:-1], dtype=work, device=q.device)
        acc = torch.zeros(*qb.shape[:-1], d_v, dtype=work, device=q.device)
        for bj in range(n_k):
            ks, ke = bj * block_size, min((bj + 1) * block_size, L_k)
            if causal and ks > qe - 1 + shift:
                break                                  # this block and every later one is in the future
            s = (qb @ k[..., ks:ke, :].to(work).transpose(-2, -1)) / math.sqrt(d_k)
            if causal and ke - 1 > qs + shift:
                rows = torch.arange(qs, qe, device=q.device)[:, None] + shift
                cols = torch.arange(ks, ke, device=q.device)[None, :]
                s = s.masked_fill(cols > rows, float("-inf"))
            m_new = torch.maximum(m, s.max(dim=-1).values)
            p = torch.exp(s - m_new[..., None])
            scale_old = torch.exp(m - m_new)
            l = scale_old * l + p.sum(-1)
            acc = scale_old[..., None] * acc + p @ v[..., ks:ke, :].to(work)
            m = m_new
        out[..., qs:qe, :] = (acc / l[..., None]).to(q.dtype)
        lse[..., qs:qe] = m + torch.log(l)
    return out, lse

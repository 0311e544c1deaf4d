"""Correct: batch and heads flattened to one axis (bmm), and two passes over the key blocks per
query block: the first finds each query's lse, the second adds up exp(s - lse) @ v, which needs no
rescaling at all. Twice the score work, still linear memory; the causal pass skips the future."""

import math

import torch


def _scores(qb, k, c0, c1, r0, r1, causal, off, scale):
    s = torch.bmm(qb, k[:, c0:c1, :].transpose(1, 2)) * scale
    if causal and c1 - 1 > r0 + off:
        later = torch.arange(c0, c1, device=qb.device)[None, :] > torch.arange(r0, r1, device=qb.device)[:, None] + off
        s = s.masked_fill(later, float("-inf"))
    return s


def flash_attention(q, k, v, causal=False, block_size=64):
    lead = q.shape[:-2]
    L_q, d_k, L_k, d_v = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
    f = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    q3 = q.reshape(-1, L_q, d_k).to(f)
    k3 = k.reshape(-1, L_k, d_k).to(f)
    v3 = v.reshape(-1, L_k, d_v).to(f)
    scale, off = 1.0 / math.sqrt(d_k), L_k - L_q
    out = torch.zeros(q3.shape[0], L_q, d_v, dtype=f, device=q.device)
    lse = torch.zeros(q3.shape[0], L_q, dtype=f, device=q.device)
    for r0 in range(0, L_q, block_size):
        r1 = min(r0 + block_size, L_q)
        qb = q3[:, r0:r1, :]
        end = min(L_k, r1 + off) if causal else L_k
        m = torch.full((q3.shape[0], r1 - r0), float("-inf"), dtype=f, device=q.device)
        l = torch.zeros_like(m)
        for c0 in range(0, end, block_size):                     # pass 1: the lse
            s = _scores(qb, k3, c0, min(c0 + block_size, L_k), r0, r1, causal, off, scale)
            m_new = torch.maximum(m, s.amax(-1))
            l = l * torch.exp(m - m_new) + torch.exp(s - m_new[..., None]).sum(-1)
            m = m_new
        row_lse = m + torch.log(l)
        acc = torch.zeros(q3.shape[0], r1 - r0, d_v, dtype=f, device=q.device)
        for c0 in range(0, end, block_size):                     # pass 2: the weights, exactly
            c1 = min(c0 + block_size, L_k)
            s = _scores(qb, k3, c0, c1, r0, r1, causal, off, scale)
            acc = acc + torch.bmm(torch.exp(s - row_lse[..., None]), v3[:, c0:c1, :])
        out[:, r0:r1] = acc
        lse[:, r0:r1] = row_lse
    return out.reshape(*lead, L_q, d_v).to(q.dtype), lse.reshape(*lead, L_q)

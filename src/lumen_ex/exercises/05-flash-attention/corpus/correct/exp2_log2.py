"""Correct: the online softmax in base 2, as FlashAttention's kernels do it: scores multiplied by
log2(e) / sqrt(d_k), exp2 instead of exp, and the lse converted back to natural units at the end."""

import math

import torch

LOG2E = 1.4426950408889634


def flash_attention(q, k, v, causal=False, block_size=64):
    acc_dtype = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    L_q, L_k = q.shape[-2], k.shape[-2]
    c = LOG2E / math.sqrt(q.shape[-1])
    outs, lses = [], []
    for i0 in range(0, L_q, block_size):
        i1 = min(i0 + block_size, L_q)
        qi = q[..., i0:i1, :].to(acc_dtype) * c
        m2 = torch.full(qi.shape[:-1], -math.inf, dtype=acc_dtype, device=q.device)
        total = torch.zeros_like(m2)
        o = torch.zeros(*qi.shape[:-1], v.shape[-1], dtype=acc_dtype, device=q.device)
        last = min(L_k, L_k - L_q + i1) if causal else L_k
        for j0 in range(0, last, block_size):
            j1 = min(j0 + block_size, L_k)
            s2 = qi @ k[..., j0:j1, :].to(acc_dtype).mT
            if causal:
                future = torch.arange(j0, j1, device=q.device)[None, :] > (
                    torch.arange(i0, i1, device=q.device)[:, None] + (L_k - L_q))
                s2 = s2.masked_fill(future, -math.inf)
            m_next = torch.maximum(m2, s2.amax(-1))
            p = torch.exp2(s2 - m_next.unsqueeze(-1))
            corr = torch.exp2(m2 - m_next)
            total = total * corr + p.sum(-1)
            o = o * corr.unsqueeze(-1) + p @ v[..., j0:j1, :].to(acc_dtype)
            m2 = m_next
        outs.append((o / total.unsqueeze(-1)).to(q.dtype))
        lses.append((m2 + torch.log2(total)) * math.log(2.0))
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)

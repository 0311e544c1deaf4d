# Base 2, as FlashAttention's kernels do it: scores in log2 units (times log2(e)), lse converted once,
# P = exp2(s2 - lse2). While loops over block indices with ceil division; key blocks outside.
import math

import torch

LOG2E = 1.4426950408889634


def flash_attention_backward(q, k, v, out, lse, d_out, causal=False, block_size=64):
    low = q.dtype in (torch.float16, torch.bfloat16)
    f = torch.float32 if low else q.dtype
    Lq, Lk, dk_ = q.shape[-2], k.shape[-2], q.shape[-1]
    sm = 1.0 / math.sqrt(dk_)
    lse2 = lse.to(f) * LOG2E
    D = (d_out.to(f) * out.to(f)).sum(dim=-1)
    dq = torch.zeros(q.shape, dtype=f, device=q.device)
    dk = torch.zeros(k.shape, dtype=f, device=q.device)
    dv = torch.zeros(v.shape, dtype=f, device=q.device)
    nq, nk = -(-Lq // block_size), -(-Lk // block_size)
    jb = 0
    while jb < nk:
        j0, j1 = jb * block_size, min((jb + 1) * block_size, Lk)
        kb, vb = k[..., j0:j1, :].to(f), v[..., j0:j1, :].to(f)
        ib = 0
        while ib < nq:
            i0, i1 = ib * block_size, min((ib + 1) * block_size, Lq)
            ib += 1
            if causal and j0 > Lk - Lq + i1 - 1:
                continue
            qb, dob = q[..., i0:i1, :].to(f), d_out[..., i0:i1, :].to(f)
            s2 = (qb @ kb.transpose(-2, -1)) * (sm * LOG2E)
            if causal and j1 - 1 > Lk - Lq + i0:
                ahead = torch.arange(j0, j1, device=q.device).view(1, -1) - torch.arange(i0, i1, device=q.device).view(-1, 1)
                s2 = s2.masked_fill(ahead > Lk - Lq, float("-inf"))
            p = torch.exp2(s2 - lse2[..., i0:i1].unsqueeze(-1))
            dv[..., j0:j1, :] += p.transpose(-2, -1) @ dob
            ds = p * (dob @ vb.transpose(-2, -1) - D[..., i0:i1].unsqueeze(-1))
            dq[..., i0:i1, :] += (ds @ kb) * sm
            dk[..., j0:j1, :] += (ds.transpose(-2, -1) @ qb) * sm
        jb += 1
    return dq.to(q.dtype), dk.to(q.dtype), dv.to(q.dtype)

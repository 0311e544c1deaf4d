# Query blocks outside, key blocks inside (the forward's order): dq of a query block accumulates in a
# local tile, dk and dv are added into their rows with slice +=. The key loop stops at the last key the
# block's last query can see, so future blocks are never visited.
import math

import torch


def flash_attention_backward(q, k, v, out, lse, d_out, causal=False, block_size=64):
    work = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    q_, k_, v_, o_, do_ = q.to(work), k.to(work), v.to(work), out.to(work), d_out.to(work)
    lse_ = lse.to(work)
    L_q, L_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    shift = L_k - L_q
    D = (do_ * o_).sum(-1)
    dq = torch.zeros_like(q_)
    dk = torch.zeros_like(k_)
    dv = torch.zeros_like(v_)
    for i0 in range(0, L_q, block_size):
        i1 = min(i0 + block_size, L_q)
        qi, doi = q_[..., i0:i1, :], do_[..., i0:i1, :]
        Di, lse_i = D[..., i0:i1, None], lse_[..., i0:i1, None]
        dq_i = torch.zeros_like(qi)
        k_end = min(L_k, shift + i1) if causal else L_k
        for j0 in range(0, k_end, block_size):
            j1 = min(j0 + block_size, L_k)
            kj, vj = k_[..., j0:j1, :], v_[..., j0:j1, :]
            s = torch.matmul(qi, kj.transpose(-1, -2)) * scale
            if causal and j1 - 1 > shift + i0:
                qpos = torch.arange(i0, i1, device=q.device).unsqueeze(1) + shift
                kpos = torch.arange(j0, j1, device=q.device).unsqueeze(0)
                s = torch.where(kpos <= qpos, s, torch.full_like(s, float("-inf")))
            p = (s - lse_i).exp()
            dp = torch.matmul(doi, vj.transpose(-1, -2))
            ds = p * (dp - Di)
            dq_i = dq_i + torch.matmul(ds, kj) * scale
            dk[..., j0:j1, :] += torch.matmul(ds.transpose(-1, -2), qi) * scale
            dv[..., j0:j1, :] += torch.matmul(p.transpose(-1, -2), doi)
        dq[..., i0:i1, :] = dq_i
    return dq.to(q.dtype), dk.to(q.dtype), dv.to(q.dtype)

"""Correct: the FlashAttention-1 form, with the output accumulator kept normalised after every key
block, O = (l_old * exp(m_old - m_new) * O + exp(s - m_new) @ V) / l_new; einsum for the products."""

import math

import torch


def flash_attention(q, k, v, causal=False, block_size=64):
    half = q.dtype in (torch.float16, torch.bfloat16)
    f = torch.float32 if half else q.dtype
    *lead, L_q, d_k = q.shape
    L_k, d_v = k.shape[-2], v.shape[-1]
    offset = L_k - L_q
    o_rows, lse_rows = [], []
    for start in range(0, L_q, block_size):
        stop = min(start + block_size, L_q)
        qb = q[..., start:stop, :].to(f)
        m = torch.full((*lead, stop - start), float("-inf"), dtype=f, device=q.device)
        l = torch.zeros((*lead, stop - start), dtype=f, device=q.device)
        o = torch.zeros((*lead, stop - start, d_v), dtype=f, device=q.device)
        key_stop = min(L_k, offset + stop) if causal else L_k
        for ks in range(0, key_stop, block_size):
            ke = min(ks + block_size, L_k)
            s = torch.einsum("...qd,...kd->...qk", qb, k[..., ks:ke, :].to(f)) / math.sqrt(d_k)
            if causal and ke - 1 > offset + start:
                qpos = torch.arange(start, stop, device=q.device) + offset
                kpos = torch.arange(ks, ke, device=q.device)
                s = torch.where(kpos[None, :] <= qpos[:, None], s, torch.full_like(s, float("-inf")))
            m_new = torch.maximum(m, s.amax(-1))
            p = torch.exp(s - m_new[..., None])
            l_new = l * torch.exp(m - m_new) + p.sum(-1)
            pv = torch.einsum("...qk,...kd->...qd", p, v[..., ks:ke, :].to(f))
            o = ((l * torch.exp(m - m_new))[..., None] * o + pv) / l_new[..., None]
            m, l = m_new, l_new
        o_rows.append(o.to(q.dtype))
        lse_rows.append(m + torch.log(l))
    return torch.cat(o_rows, dim=-2), torch.cat(lse_rows, dim=-1)

# No use of `out`: a first blockwise pass computes the row term D = rowsum(dP * P) over every key block
# of each query (the definition, rather than FlashAttention-2's rowsum(d_out * out)), a second pass the
# gradients. Twice the block work, still linear memory; causal skips future blocks in both passes.
import math

import torch


def _blocks(L, b):
    return [(s, min(s + b, L)) for s in range(0, L, b)]


def flash_attention_backward(q, k, v, out, lse, d_out, causal=False, block_size=64):
    half = q.dtype in (torch.float16, torch.bfloat16)
    cast = (lambda t: t.float()) if half else (lambda t: t)
    q32, k32, v32, do32, lse32 = cast(q), cast(k), cast(v), cast(d_out), lse.to(torch.float32 if half else q.dtype)
    Lq, Lk = q.shape[-2], k.shape[-2]
    c = q.shape[-1] ** -0.5
    off = Lk - Lq

    def tiles():
        for a, b in _blocks(Lq, block_size):
            for j, e in _blocks(Lk, block_size):
                if causal and j > off + b - 1:
                    break
                s = q32[..., a:b, :] @ k32[..., j:e, :].mT * c
                if causal and e - 1 > off + a:
                    hide = torch.arange(j, e, device=q.device) > (torch.arange(a, b, device=q.device) + off)[:, None]
                    s = s.masked_fill(hide, -math.inf)
                p = torch.exp(s - lse32[..., a:b].unsqueeze(-1))
                dp = do32[..., a:b, :] @ v32[..., j:e, :].mT
                yield a, b, j, e, p, dp

    D = torch.zeros_like(lse32)
    for a, b, j, e, p, dp in tiles():
        D[..., a:b] += (p * dp).sum(-1)
    dq, dk, dv = torch.zeros_like(q32), torch.zeros_like(k32), torch.zeros_like(v32)
    for a, b, j, e, p, dp in tiles():
        ds = p * (dp - D[..., a:b].unsqueeze(-1))
        dq[..., a:b, :] += ds @ k32[..., j:e, :] * c
        dk[..., j:e, :] += ds.mT @ q32[..., a:b, :] * c
        dv[..., j:e, :] += p.mT @ do32[..., a:b, :]
    return dq.to(q.dtype), dk.to(q.dtype), dv.to(q.dtype)

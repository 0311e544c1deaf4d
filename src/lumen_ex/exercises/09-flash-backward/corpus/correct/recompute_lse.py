# Ignores the lse it is given and recomputes it per query block with an online log-sum-exp over the key
# blocks (allowed, and counted as work), then does the gradient pass for that query block.
import math

import torch


def flash_attention_backward(q, k, v, out, lse, d_out, causal=False, block_size=64):
    dtype = q.dtype
    acc = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    q, k, v, out, d_out = q.to(acc), k.to(acc), v.to(acc), out.to(acc), d_out.to(acc)
    n, m = q.shape[-2], k.shape[-2]
    sc = 1.0 / math.sqrt(q.shape[-1])
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    delta = (d_out * out).sum(-1, keepdim=True)

    def scores(i0, i1, j0, j1):
        s = q[..., i0:i1, :] @ k[..., j0:j1, :].transpose(-2, -1) * sc
        if causal:
            future = torch.arange(j0, j1, device=q.device)[None, :] > torch.arange(i0, i1, device=q.device)[:, None] + (m - n)
            s = s.masked_fill(future, float("-inf"))
        return s

    for i0 in range(0, n, block_size):
        i1 = min(i0 + block_size, n)
        last = min(m, m - n + i1) if causal else m
        run = torch.full((*q.shape[:-2], i1 - i0, 1), float("-inf"), dtype=acc, device=q.device)
        for j0 in range(0, last, block_size):
            run = torch.logaddexp(run, torch.logsumexp(scores(i0, i1, j0, min(j0 + block_size, m)), -1, keepdim=True))
        for j0 in range(0, last, block_size):
            j1 = min(j0 + block_size, m)
            p = torch.exp(scores(i0, i1, j0, j1) - run)
            dv[..., j0:j1, :] += p.transpose(-2, -1) @ d_out[..., i0:i1, :]
            ds = p * (d_out[..., i0:i1, :] @ v[..., j0:j1, :].transpose(-2, -1) - delta[..., i0:i1, :])
            dq[..., i0:i1, :] += ds @ k[..., j0:j1, :] * sc
            dk[..., j0:j1, :] += ds.transpose(-2, -1) @ q[..., i0:i1, :] * sc
    return dq.to(dtype), dk.to(dtype), dv.to(dtype)

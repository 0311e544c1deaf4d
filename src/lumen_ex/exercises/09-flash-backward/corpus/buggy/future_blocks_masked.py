# bug: computes every block pair and masks the future, instead of skipping the blocks entirely in it
# expect-kind: property
# expect-misconception: future-blocks-computed
# expect-test: test_causal_skips_future_blocks
import math

import torch


def flash_attention_backward(q, k, v, out, lse, d_out, causal=False, block_size=64):
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    L_q, d_k = q.shape[-2], q.shape[-1]
    L_k = k.shape[-2]
    scale = 1.0 / math.sqrt(d_k)
    offset = L_k - L_q
    q32, k32, v32, do32 = q.to(acc), k.to(acc), v.to(acc), d_out.to(acc)
    lse32 = lse.to(acc)
    D = (do32 * out.to(acc)).sum(dim=-1)
    dq = torch.zeros_like(q32)
    dk = torch.zeros_like(k32)
    dv = torch.zeros_like(v32)
    for j0 in range(0, L_k, block_size):
        j1 = min(j0 + block_size, L_k)
        kj, vj = k32[..., j0:j1, :], v32[..., j0:j1, :]
        for i0 in range(0, L_q, block_size):
            i1 = min(i0 + block_size, L_q)
            qi, doi = q32[..., i0:i1, :], do32[..., i0:i1, :]
            s = qi @ kj.transpose(-2, -1) * scale
            if causal:
                q_pos = torch.arange(i0, i1, device=q.device)[:, None] + offset
                k_pos = torch.arange(j0, j1, device=q.device)[None, :]
                s = s.masked_fill(k_pos > q_pos, float("-inf"))
            p = torch.exp(s - lse32[..., i0:i1, None])
            dv[..., j0:j1, :] += p.transpose(-2, -1) @ doi
            dp = doi @ vj.transpose(-2, -1)
            ds = p * (dp - D[..., i0:i1, None])
            dq[..., i0:i1, :] += ds @ kj * scale
            dk[..., j0:j1, :] += ds.transpose(-2, -1) @ qi * scale
    return dq.to(q.dtype), dk.to(q.dtype), dv.to(q.dtype)

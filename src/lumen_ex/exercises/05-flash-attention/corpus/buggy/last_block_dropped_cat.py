# bug: iterates over range(L // block_size) blocks and concatenates them, so the output is short by the last partial block
# expect-kind: shape
# expect-misconception: partial-block-dropped
# expect-test: test_shapes[4d]
import math

import torch


def flash_attention(q, k, v, causal=False, block_size=64):
    dt = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    L_q, L_k = q.shape[-2], k.shape[-2]
    off = L_k - L_q
    outs, lses = [], []
    for b in range(L_q // block_size):
        qs = q[..., b * block_size:(b + 1) * block_size, :].to(dt) / math.sqrt(q.shape[-1])
        m = torch.full(qs.shape[:-1], float("-inf"), dtype=dt, device=q.device)
        l = torch.zeros_like(m)
        o = torch.zeros(*qs.shape[:-1], v.shape[-1], dtype=dt, device=q.device)
        for c in range(L_k // block_size):
            j0, j1 = c * block_size, (c + 1) * block_size
            if causal and j0 > off + (b + 1) * block_size - 1:
                break
            s = qs @ k[..., j0:j1, :].to(dt).transpose(-2, -1)
            if causal:
                rows = torch.arange(b * block_size, (b + 1) * block_size, device=q.device)[:, None] + off
                s = s.masked_fill(torch.arange(j0, j1, device=q.device)[None, :] > rows, float("-inf"))
            mn = torch.maximum(m, s.amax(-1))
            p = torch.exp(s - mn[..., None])
            a = torch.exp(m - mn)
            l = l * a + p.sum(-1)
            o = o * a[..., None] + p @ v[..., j0:j1, :].to(dt)
            m = mn
        outs.append((o / l[..., None]).to(q.dtype))
        lses.append(m + torch.log(l))
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)

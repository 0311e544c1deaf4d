# bug: uses exp2/log2 with scores times log2(e), and returns lse in log2 units (no conversion back)
# expect-kind: values
# expect-misconception: lse-base-2
# expect-test: test_lse[4d]
import math

import torch


def flash_attention(q, k, v, causal=False, block_size=64):
    f = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    L_q, L_k = q.shape[-2], k.shape[-2]
    c = math.log2(math.e) / math.sqrt(q.shape[-1])
    outs, lses = [], []
    for i0 in range(0, L_q, block_size):
        i1 = min(i0 + block_size, L_q)
        qi = q[..., i0:i1, :].to(f) * c
        m = torch.full(qi.shape[:-1], -math.inf, dtype=f, device=q.device)
        l = torch.zeros_like(m)
        o = torch.zeros(*qi.shape[:-1], v.shape[-1], dtype=f, device=q.device)
        for j0 in range(0, min(L_k, L_k - L_q + i1) if causal else L_k, block_size):
            j1 = min(j0 + block_size, L_k)
            s = qi @ k[..., j0:j1, :].to(f).transpose(-2, -1)
            if causal:
                hide = torch.arange(j0, j1, device=q.device)[None, :] > torch.arange(i0, i1, device=q.device)[:, None] + (L_k - L_q)
                s = s.masked_fill(hide, -math.inf)
            mn = torch.maximum(m, s.amax(-1))
            p = torch.exp2(s - mn[..., None])
            a = torch.exp2(m - mn)
            l = l * a + p.sum(-1)
            o = o * a[..., None] + p @ v[..., j0:j1, :].to(f)
            m = mn
        outs.append((o / l[..., None]).to(q.dtype))
        lses.append(m + torch.log2(l))
    return torch.cat(outs, -2), torch.cat(lses, -1)

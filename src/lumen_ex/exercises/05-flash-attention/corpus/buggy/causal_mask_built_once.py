# bug: builds the whole (L_q, L_k) causal mask once and slices it per block: a quadratic mask
# expect-kind: property
# expect-misconception: quadratic-memory
# expect-test: test_memory_linear_in_length
import math

import torch


def flash_attention(q, k, v, causal=False, block_size=64):
    L_q, L_k = q.shape[-2], k.shape[-2]
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    visible = torch.ones(L_q, L_k, dtype=torch.bool, device=q.device).tril(L_k - L_q) if causal else None
    out, lse = [], []
    for i in range(0, L_q, block_size):
        ie = min(i + block_size, L_q)
        qi = q[..., i:ie, :].to(acc) / math.sqrt(q.shape[-1])
        m = torch.full(qi.shape[:-1], float("-inf"), dtype=acc, device=q.device)
        l = torch.zeros_like(m)
        o = torch.zeros(*qi.shape[:-1], v.shape[-1], dtype=acc, device=q.device)
        stop = min(L_k, L_k - L_q + ie) if causal else L_k
        for j in range(0, stop, block_size):
            je = min(j + block_size, L_k)
            s = qi @ k[..., j:je, :].to(acc).transpose(-2, -1)
            if causal:
                s = s.masked_fill(~visible[i:ie, j:je], float("-inf"))
            mn = torch.maximum(m, s.amax(-1))
            p = torch.exp(s - mn[..., None])
            r = torch.exp(m - mn)
            l = l * r + p.sum(-1)
            o = o * r[..., None] + p @ v[..., j:je, :].to(acc)
            m = mn
        out.append((o / l[..., None]).to(q.dtype))
        lse.append(m + torch.log(l))
    return torch.cat(out, -2), torch.cat(lse, -1)

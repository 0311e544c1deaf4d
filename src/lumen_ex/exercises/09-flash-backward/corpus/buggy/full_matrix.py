# bug: ignores block_size and builds the whole (L_q, L_k) matrices of P, dP and dS: right values, quadratic memory
# expect-kind: property
# expect-misconception: quadratic-memory
# expect-test: test_memory_linear_in_length
import math

import torch


def flash_attention_backward(q, k, v, out, lse, d_out, causal=False, block_size=64):
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    q, k, v, o, do = (t.to(acc) for t in (q, k, v, out, d_out))
    L_q, L_k = q.shape[-2], k.shape[-2]
    scale = 1 / math.sqrt(q.shape[-1])
    s = q @ k.transpose(-2, -1) * scale
    if causal:
        mask = torch.ones(L_q, L_k, dtype=torch.bool, device=q.device).tril(L_k - L_q)
        s = s.masked_fill(~mask, float("-inf"))
    p = torch.exp(s - lse.to(acc)[..., None])
    dp = do @ v.transpose(-2, -1)
    ds = p * (dp - (do * o).sum(-1, keepdim=True))
    dtype = out.dtype
    return (ds @ k * scale).to(dtype), (ds.transpose(-2, -1) @ q * scale).to(dtype), (p.transpose(-2, -1) @ do).to(dtype)

# bug: computes the whole (L_q, L_k) score matrix first, then runs the online softmax over its column blocks
# expect-kind: property
# expect-misconception: quadratic-memory
# expect-test: test_memory_linear_in_length
import math

import torch


def flash_attention(q, k, v, causal=False, block_size=64):
    work = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    L_q, L_k = q.shape[-2], k.shape[-2]
    scores = (q.to(work) @ k.to(work).transpose(-2, -1)) / math.sqrt(q.shape[-1])   # all of it, once
    if causal:
        rows = torch.arange(L_q, device=q.device)[:, None] + (L_k - L_q)
        scores = scores.masked_fill(torch.arange(L_k, device=q.device)[None, :] > rows, float("-inf"))
    m = torch.full(q.shape[:-1], float("-inf"), dtype=work, device=q.device)
    l = torch.zeros(q.shape[:-1], dtype=work, device=q.device)
    o = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=work, device=q.device)
    for j in range(0, L_k, block_size):
        s = scores[..., j:j + block_size]
        m_new = torch.maximum(m, s.amax(-1))
        p = torch.exp(s - m_new[..., None])
        a = torch.exp(m - m_new)
        l = l * a + p.sum(-1)
        o = o * a[..., None] + p @ v[..., j:j + block_size, :].to(work)
        m = m_new
    return (o / l[..., None]).to(q.dtype), m + torch.log(l)

# bug: the causal mask is aligned top-left (query i sees keys 0 .. i), as sdpa's is_causal does
# expect-kind: values
# expect-misconception: causal-top-left
# expect-test: test_causal[rectangular]
import math

import torch


def flash_attention(q, k, v, causal=False, block_size=64):
    L_q, L_k = q.shape[-2], k.shape[-2]
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    scale = 1 / math.sqrt(q.shape[-1])
    offset = 0
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.zeros(q.shape[:-1], dtype=acc, device=q.device)
    for i in range(0, L_q, block_size):
        i_end = min(i + block_size, L_q)
        qi = q[..., i:i_end, :].to(acc)
        m = torch.full(qi.shape[:-1], float("-inf"), dtype=acc, device=q.device)
        l = torch.zeros(qi.shape[:-1], dtype=acc, device=q.device)
        o = torch.zeros(*qi.shape[:-1], v.shape[-1], dtype=acc, device=q.device)
        k_end = min(L_k, offset + i_end) if causal else L_k
        for j in range(0, k_end, block_size):
            j_end = min(j + block_size, L_k)
            s = qi @ k[..., j:j_end, :].to(acc).transpose(-2, -1) * scale
            if causal and j_end - 1 > offset + i:
                q_pos = torch.arange(i, i_end, device=q.device)[:, None] + offset
                k_pos = torch.arange(j, j_end, device=q.device)[None, :]
                s = s.masked_fill(k_pos > q_pos, float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))
            p = torch.exp(s - m_new[..., None])
            alpha = torch.exp(m - m_new)
            l = l * alpha + p.sum(dim=-1)
            o = o * alpha[..., None] + p @ v[..., j:j_end, :].to(acc)
            m = m_new
        out[..., i:i_end, :] = (o / l[..., None]).to(q.dtype)
        lse[..., i:i_end] = m + torch.log(l)
    return out, lse

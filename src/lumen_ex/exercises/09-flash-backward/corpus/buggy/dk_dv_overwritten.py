# bug: query blocks outside, and dk, dv of each key block assigned (=) rather than added: only the last query block's part survives
# expect-kind: values
# expect-misconception: dkdv-one-query-block
import math

import torch


def flash_attention_backward(q, k, v, out, lse, d_out, causal=False, block_size=64):
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    qa, ka, va, oa, doa, la = (t.to(acc) for t in (q, k, v, out, d_out, lse))
    L_q, L_k = q.shape[-2], k.shape[-2]
    scale = 1 / math.sqrt(q.shape[-1])
    D = (doa * oa).sum(-1, keepdim=True)
    dq, dk, dv = torch.zeros_like(qa), torch.zeros_like(ka), torch.zeros_like(va)
    for i0 in range(0, L_q, block_size):
        i1 = min(i0 + block_size, L_q)
        stop = min(L_k, L_k - L_q + i1) if causal else L_k
        for j0 in range(0, stop, block_size):
            j1 = min(j0 + block_size, L_k)
            s = qa[..., i0:i1, :] @ ka[..., j0:j1, :].transpose(-2, -1) * scale
            if causal:
                hide = torch.arange(j0, j1, device=q.device)[None, :] > torch.arange(i0, i1, device=q.device)[:, None] + L_k - L_q
                s = s.masked_fill(hide, float("-inf"))
            p = torch.exp(s - la[..., i0:i1, None])
            ds = p * (doa[..., i0:i1, :] @ va[..., j0:j1, :].transpose(-2, -1) - D[..., i0:i1, :])
            dq[..., i0:i1, :] += ds @ ka[..., j0:j1, :] * scale
            dk[..., j0:j1, :] = ds.transpose(-2, -1) @ qa[..., i0:i1, :] * scale
            dv[..., j0:j1, :] = p.transpose(-2, -1) @ doa[..., i0:i1, :]
    return dq.to(q.dtype), dk.to(q.dtype), dv.to(q.dtype)

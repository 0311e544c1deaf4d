# The leading axes flattened into one batch axis (reshape, so strided inputs work) and torch.bmm /
# baddbmm on (N, rows, cols) tiles. The block pairs to visit are listed first, causal ones filtered
# out when the whole key block lies after the query block's last query; dk and dv of a key block
# are accumulated in place with baddbmm.
import math

import torch


def flash_attention_backward(q, k, v, out, lse, d_out, causal=False, block_size=64):
    lead = q.shape[:-2]
    L_q, d_k = q.shape[-2:]
    L_k, d_v = v.shape[-2:]
    ct = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    Q = q.reshape(-1, L_q, d_k).to(ct)
    K = k.reshape(-1, L_k, d_k).to(ct)
    V = v.reshape(-1, L_k, d_v).to(ct)
    dO = d_out.reshape(-1, L_q, d_v).to(ct)
    Dl = (dO * out.reshape(-1, L_q, d_v).to(ct)).sum(-1, keepdim=True)
    M = lse.reshape(-1, L_q, 1).to(ct)
    a = 1.0 / math.sqrt(d_k)
    pairs = [(i0, j0) for j0 in range(0, L_k, block_size) for i0 in range(0, L_q, block_size)
             if not (causal and j0 >= L_k - L_q + min(i0 + block_size, L_q))]
    dQ, dK, dV = torch.zeros_like(Q), torch.zeros_like(K), torch.zeros_like(V)
    for i0, j0 in pairs:
        i1, j1 = min(i0 + block_size, L_q), min(j0 + block_size, L_k)
        S = torch.bmm(Q[:, i0:i1], K[:, j0:j1].transpose(1, 2)).mul_(a)
        if causal and j1 > L_k - L_q + i0 + 1:
            over = torch.arange(j0, j1, device=q.device).view(1, 1, -1) > torch.arange(i0, i1, device=q.device).view(1, -1, 1) + (L_k - L_q)
            S = S.masked_fill(over, float("-inf"))
        P = torch.exp(S - M[:, i0:i1])
        dS = P * (torch.bmm(dO[:, i0:i1], V[:, j0:j1].transpose(1, 2)) - Dl[:, i0:i1])
        dV[:, j0:j1] = torch.baddbmm(dV[:, j0:j1], P.transpose(1, 2), dO[:, i0:i1])
        dK[:, j0:j1] = torch.baddbmm(dK[:, j0:j1], dS.transpose(1, 2), Q[:, i0:i1], alpha=a)
        dQ[:, i0:i1] = torch.baddbmm(dQ[:, i0:i1], dS, K[:, j0:j1], alpha=a)
    return (dQ.reshape(*lead, L_q, d_k).to(q.dtype), dK.reshape(*lead, L_k, d_k).to(q.dtype),
            dV.reshape(*lead, L_k, d_v).to(q.dtype))

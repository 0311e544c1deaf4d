# Everything in float64 inside, with einsum, cast back at the end; key blocks outside, and for each
# key block only the query blocks from the first one that can see it.
import math

import torch


def flash_attention_backward(q, k, v, out, lse, d_out, causal=False, block_size=64):
    Q, K, V, O, dO, LSE = (t.double() for t in (q, k, v, out, d_out, lse))
    L_q, L_k, d_k = Q.shape[-2], K.shape[-2], Q.shape[-1]
    inv = 1 / math.sqrt(d_k)
    delta = torch.einsum("...id,...id->...i", dO, O)
    dQ, dK, dV = torch.zeros_like(Q), torch.zeros_like(K), torch.zeros_like(V)
    n_q = (L_q + block_size - 1) // block_size
    for j0 in range(0, L_k, block_size):
        j1 = min(L_k, j0 + block_size)
        Kj, Vj = K[..., j0:j1, :], V[..., j0:j1, :]
        dKj, dVj = torch.zeros_like(Kj), torch.zeros_like(Vj)
        for bi in range(n_q):
            i0, i1 = bi * block_size, min(L_q, (bi + 1) * block_size)
            if causal and L_k - L_q + i1 - 1 < j0:
                continue
            S = torch.einsum("...id,...jd->...ij", Q[..., i0:i1, :], Kj) * inv
            if causal:
                qp = torch.arange(i0, i1, device=q.device) + (L_k - L_q)
                kp = torch.arange(j0, j1, device=q.device)
                S = S.masked_fill(kp[None, :] > qp[:, None], float("-inf"))
            P = torch.exp(S - LSE[..., i0:i1, None])
            dVj += torch.einsum("...ij,...ie->...je", P, dO[..., i0:i1, :])
            dP = torch.einsum("...ie,...je->...ij", dO[..., i0:i1, :], Vj)
            dS = P * (dP - delta[..., i0:i1, None])
            dQ[..., i0:i1, :] += torch.einsum("...ij,...jd->...id", dS, Kj) * inv
            dKj += torch.einsum("...ij,...id->...jd", dS, Q[..., i0:i1, :]) * inv
        dK[..., j0:j1, :] = dKj
        dV[..., j0:j1, :] = dVj
    return dQ.to(q.dtype), dK.to(k.dtype), dV.to(v.dtype)

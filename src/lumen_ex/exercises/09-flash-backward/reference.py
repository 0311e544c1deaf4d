"""Reference for exercise 9: the backward pass of FlashAttention, block by block, from the saved lse.

The forward (exercise 5) kept only its output ``out`` and the log-sum-exp ``lse`` of each query's
scaled scores. The backward rebuilds any block of the weights from them, ``P = exp(S - lse)``,
without the (L_q, L_k) matrix, and needs one more number per query, ``D = rowsum(d_out * out)``
(which equals rowsum(dP * P): the softmax Jacobian's row term). Then, for each pair of a key block
and a query block:

    dv_j += P^T dO_i            dP = dO_i v_j^T            dS = P * (dP - D_i)
    dq_i += dS k_j * scale      dk_j += dS^T q_i * scale

The loop runs over key blocks outside (dk_j and dv_j accumulate in registers, FlashAttention-2's
order) and query blocks inside. With ``causal=True`` (bottom-right: query i sits at key position
L_k - L_q + i), a query block whose last query comes before the key block's first key is skipped;
only blocks that cross the diagonal are masked. Memory is O(block_size^2 + L * d).
"""

from __future__ import annotations

import math

import torch


def flash_attention_backward(q, k, v, out, lse, d_out, causal=False, block_size=64):
    """The gradients (dq, dk, dv) of sum(output * d_out), output = softmax(q k^T / sqrt(d_k)) v.

    q: (..., L_q, d_k)   k: (..., L_k, d_k)   v: (..., L_k, d_v)
    out, d_out: (..., L_q, d_v)   lse: (..., L_q) (float32 for float16/bfloat16 inputs)
    Returns dq (..., L_q, d_k), dk (..., L_k, d_k), dv (..., L_k, d_v), in q's dtype.
    """
    L_q, d_k = q.shape[-2], q.shape[-1]
    L_k = k.shape[-2]
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    scale = 1.0 / math.sqrt(d_k)
    offset = L_k - L_q                                       # query i sits at key position offset + i
    qa, ka, va, doa = (t.to(acc) for t in (q, k, v, d_out))
    lse_a = lse.to(acc)                                      # (..., L_q)
    D = (doa * out.to(acc)).sum(dim=-1)                      # (..., L_q): rowsum(dP * P), per row
    dq = torch.zeros(qa.shape, dtype=acc, device=q.device)   # (..., L_q, d_k)
    dk = torch.zeros(ka.shape, dtype=acc, device=q.device)   # (..., L_k, d_k)
    dv = torch.zeros(va.shape, dtype=acc, device=q.device)   # (..., L_k, d_v)
    for j0 in range(0, L_k, block_size):
        j1 = min(j0 + block_size, L_k)
        k_blk, v_blk = ka[..., j0:j1, :], va[..., j0:j1, :]  # (..., b_k, d_k), (..., b_k, d_v)
        for i0 in range(0, L_q, block_size):
            i1 = min(i0 + block_size, L_q)
            if causal and j0 > offset + i1 - 1:              # the whole key block is in this block's future
                continue
            q_blk, do_blk = qa[..., i0:i1, :], doa[..., i0:i1, :]    # (..., b_q, d_k), (..., b_q, d_v)
            s = q_blk @ k_blk.transpose(-2, -1) * scale      # (..., b_q, b_k)
            if causal and j1 - 1 > offset + i0:              # the block crosses the diagonal
                q_pos = torch.arange(i0, i1, device=q.device)[:, None] + offset     # (b_q, 1)
                k_pos = torch.arange(j0, j1, device=q.device)[None, :]              # (1, b_k)
                s = s.masked_fill(k_pos > q_pos, float("-inf"))
            p = torch.exp(s - lse_a[..., i0:i1, None])       # (..., b_q, b_k): the forward's weights
            dv[..., j0:j1, :] += p.transpose(-2, -1) @ do_blk            # (..., b_k, d_v)
            dp = do_blk @ v_blk.transpose(-2, -1)            # (..., b_q, b_k)
            ds = p * (dp - D[..., i0:i1, None])              # (..., b_q, b_k)
            dq[..., i0:i1, :] += ds @ k_blk * scale          # (..., b_q, d_k)
            dk[..., j0:j1, :] += ds.transpose(-2, -1) @ q_blk * scale    # (..., b_k, d_k)
    return dq.to(q.dtype), dk.to(q.dtype), dv.to(q.dtype)


def attention_forward(q, k, v, causal=False):
    """Exercise 5's forward, the plain way: (out (..., L_q, d_v), lse (..., L_q)), in q's dtype.
    The suite computes it in float64 to make the ``out`` and ``lse`` it passes."""
    L_q, L_k = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])              # (..., L_q, L_k)
    if causal:
        q_pos = torch.arange(L_q, device=q.device)[:, None] + (L_k - L_q)  # (L_q, 1)
        k_pos = torch.arange(L_k, device=q.device)[None, :]                 # (1, L_k)
        scores = scores.masked_fill(k_pos > q_pos, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)                                    # (..., L_q)
    return torch.softmax(scores, dim=-1) @ v, lse                            # (..., L_q, d_v), (..., L_q)


def attention_backward(q, k, v, d_out, causal=False):
    """The same gradients the plain way, whole matrices (for the suite's float64 truth):
    (dq, dk, dv) of sum(softmax(q k^T / sqrt(d_k)) v * d_out)."""
    L_q, L_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1) * scale                                 # (..., L_q, L_k)
    if causal:
        q_pos = torch.arange(L_q, device=q.device)[:, None] + (L_k - L_q)  # (L_q, 1)
        k_pos = torch.arange(L_k, device=q.device)[None, :]                 # (1, L_k)
        scores = scores.masked_fill(k_pos > q_pos, float("-inf"))
    p = torch.softmax(scores, dim=-1)                                        # (..., L_q, L_k)
    dp = d_out @ v.transpose(-2, -1)                                         # (..., L_q, L_k)
    ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))                       # (..., L_q, L_k)
    return ds @ k * scale, ds.transpose(-2, -1) @ q * scale, p.transpose(-2, -1) @ d_out

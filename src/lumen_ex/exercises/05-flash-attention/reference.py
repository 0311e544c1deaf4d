"""Reference for exercise 5: exact attention, block by block, with an online softmax.

The (L_q, L_k) score matrix is never built: each query block meets the key blocks one at a time,
keeping per query a running maximum ``m``, a running sum ``l`` of exp(score - m) and an output
accumulator; when a new block raises the maximum, the sum and the accumulator are rescaled by
exp(old max - new max). Memory is O(block_size^2 + L * d) for any length. With ``causal=True``
(aligned bottom-right: query i sits at position L_k - L_q + i), key blocks entirely in the future
of a query block are never visited; only blocks that cross the diagonal are masked.
"""

from __future__ import annotations

import math

import torch


def flash_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d_k)) v, and the log-sum-exp of each query's scaled scores.

    q: (..., L_q, d_k)   k: (..., L_k, d_k)   v: (..., L_k, d_v)   block_size: an int >= 1
    Returns output (..., L_q, d_v) in q's dtype, and lse (..., L_q): in q's dtype, or float32 for
    float16 and bfloat16 inputs (the accumulators are float32 for those, as in FlashAttention).
    """
    L_q, d_k = q.shape[-2], q.shape[-1]
    L_k, d_v = k.shape[-2], v.shape[-1]
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    scale = 1.0 / math.sqrt(d_k)
    offset = L_k - L_q                                   # query i sits at key position offset + i
    out = torch.empty(*q.shape[:-1], d_v, dtype=q.dtype, device=q.device)   # (..., L_q, d_v)
    lse = torch.empty(q.shape[:-1], dtype=acc, device=q.device)             # (..., L_q)
    for i0 in range(0, L_q, block_size):
        i1 = min(i0 + block_size, L_q)
        q_blk = q[..., i0:i1, :].to(acc) * scale                             # (..., b_q, d_k)
        m = torch.full(q_blk.shape[:-1], float("-inf"), dtype=acc, device=q.device)   # (..., b_q)
        row_sum = torch.zeros(q_blk.shape[:-1], dtype=acc, device=q.device)  # (..., b_q)
        o = torch.zeros(*q_blk.shape[:-1], d_v, dtype=acc, device=q.device) # (..., b_q, d_v)
        # The last query of this block sees keys 0 .. offset + i1 - 1: later key blocks are skipped.
        k_end = min(L_k, offset + i1) if causal else L_k
        for j0 in range(0, max(k_end, 0), block_size):
            j1 = min(j0 + block_size, L_k)
            k_blk = k[..., j0:j1, :].to(acc)                                 # (..., b_k, d_k)
            v_blk = v[..., j0:j1, :].to(acc)                                 # (..., b_k, d_v)
            s = q_blk @ k_blk.transpose(-2, -1)                              # (..., b_q, b_k)
            if causal and j1 - 1 > offset + i0:          # the block crosses the diagonal: mask it
                q_pos = torch.arange(i0, i1, device=q.device) + offset       # (b_q,)
                k_pos = torch.arange(j0, j1, device=q.device)                # (b_k,)
                s = s.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))                         # (..., b_q)
            # A row that has seen no key yet keeps m = -inf: shift it by 0, not by -inf (NaN).
            shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)  # (..., b_q)
            p = torch.exp(s - shift[..., None])                              # (..., b_q, b_k)
            alpha = torch.exp(m - shift)                                     # (..., b_q), 0 at the start
            row_sum = row_sum * alpha + p.sum(dim=-1)                        # (..., b_q)
            o = o * alpha[..., None] + p @ v_blk                             # (..., b_q, d_v)
            m = m_new
        out[..., i0:i1, :] = (o / row_sum[..., None]).to(q.dtype)            # (..., b_q, d_v)
        lse[..., i0:i1] = m + torch.log(row_sum)                             # (..., b_q)
    return out, lse


def attention_with_lse(q, k, v, causal=False):
    """The same result the plain way, with the whole (L_q, L_k) matrix (small inputs only): the
    ground truth the hidden suite compares with, in float64."""
    L_q, L_k = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])               # (..., L_q, L_k)
    if causal:
        q_pos = torch.arange(L_q, device=q.device)[:, None] + (L_k - L_q)   # (L_q, 1)
        k_pos = torch.arange(L_k, device=q.device)[None, :]                 # (1, L_k)
        scores = scores.masked_fill(k_pos > q_pos, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)                                    # (..., L_q)
    return torch.softmax(scores, dim=-1) @ v, lse                            # (..., L_q, d_v), (..., L_q)

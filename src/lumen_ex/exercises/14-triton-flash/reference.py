"""Reference for exercise 14: FlashAttention's forward pass as a Triton kernel (FlashAttention-2's loop).

One program computes BLOCK_M query rows of one head: it keeps the running maximum ``m``, the running
sum ``l_i`` and the unnormalised output ``acc`` of those rows in float32, walks the keys in blocks of
BLOCK_N (each block's scores are one ``tl.dot``), and rescales ``l_i`` and ``acc`` whenever ``m`` grows.
Shapes: H heads (batch and heads flattened), L_q queries, L_k keys, D the head width.
"""

import triton
import triton.language as tl


@triton.jit
def flash_attention_kernel(Q, K, V, Out, Lse,
                           stride_qh, stride_qm, stride_kh, stride_kn, stride_vh, stride_vn,
                           stride_oh, stride_om, stride_lh,
                           L_q, L_k, scale,
                           D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)                     # which block of queries
    h = tl.program_id(1)                           # which head
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)                               # (BLOCK_M,)
    dims = tl.arange(0, D)                                                         # (D,)
    row_ok = rows < L_q
    q = tl.load(Q + h * stride_qh + rows[:, None] * stride_qm + dims[None, :], mask=row_ok[:, None], other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)                              # running max
    l_i = tl.zeros([BLOCK_M], tl.float32)                                            # running sum
    acc = tl.zeros([BLOCK_M, D], tl.float32)                                       # (BLOCK_M, D)
    offset = L_k - L_q                             # causal: query i sits at key position i + offset
    end = L_k
    if CAUSAL:                                     # blocks entirely in the future are never visited
        end = tl.minimum((start_m + 1) * BLOCK_M + offset, L_k)
    for start_n in range(0, end, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)                                     # (BLOCK_N,)
        col_ok = cols < L_k
        k_t = tl.load(K + h * stride_kh + cols[None, :] * stride_kn + dims[:, None], mask=col_ok[None, :],
                      other=0.0)                                                   # (D, BLOCK_N): K transposed
        s = tl.dot(q, k_t).to(tl.float32) * scale                                  # (BLOCK_M, BLOCK_N)
        keep = col_ok[None, :]
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None] + offset)
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))                                        # (BLOCK_M,)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)                      # a row with no key yet
        alpha = tl.exp(m - m_safe)
        p = tl.exp(s - m_safe[:, None])                                            # (BLOCK_M, BLOCK_N)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + h * stride_vh + cols[:, None] * stride_vn + dims[None, :], mask=col_ok[:, None],
                    other=0.0)                                                     # (BLOCK_N, D)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v).to(tl.float32)
        m = m_new
    out = acc / l_i[:, None]
    tl.store(Out + h * stride_oh + rows[:, None] * stride_om + dims[None, :], out.to(Out.dtype.element_ty),
             mask=row_ok[:, None])
    tl.store(Lse + h * stride_lh + rows, m + tl.log(l_i), mask=row_ok)

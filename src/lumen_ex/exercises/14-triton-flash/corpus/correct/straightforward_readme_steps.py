# correct: straightforward, following the README's steps one by one (k loaded transposed, other= on loads, tl.exp/tl.log)
"""Exercise 14: FlashAttention's forward pass as a Triton kernel."""

import triton
import triton.language as tl


@triton.jit
def flash_attention_kernel(Q, K, V, Out, Lse,
                           stride_qh, stride_qm, stride_kh, stride_kn, stride_vh, stride_vn,
                           stride_oh, stride_om, stride_lh,
                           L_q, L_k, scale,
                           D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    pid_m = tl.program_id(0)
    h = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    row_ok = rows < L_q

    q = tl.load(Q + h * stride_qh + rows[:, None] * stride_qm + dims[None, :],
                mask=row_ok[:, None], other=0.0)

    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)

    end_n = L_k
    if CAUSAL:
        end_n = tl.minimum((pid_m + 1) * BLOCK_M + L_k - L_q, L_k)

    for start_n in range(0, end_n, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        col_ok = cols < L_k
        k_t = tl.load(K + h * stride_kh + cols[None, :] * stride_kn + dims[:, None],
                      mask=col_ok[None, :], other=0.0)
        v = tl.load(V + h * stride_vh + cols[:, None] * stride_vn + dims[None, :],
                    mask=col_ok[:, None], other=0.0)

        s = tl.dot(q, k_t) * scale
        keep = col_ok[None, :]
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None] + L_k - L_q)
        s = tl.where(keep, s, float("-inf"))

        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new

    out = acc / l[:, None]
    tl.store(Out + h * stride_oh + rows[:, None] * stride_om + dims[None, :],
             out.to(Out.dtype.element_ty), mask=row_ok[:, None])
    tl.store(Lse + h * stride_lh + rows, m + tl.log(l), mask=row_ok)

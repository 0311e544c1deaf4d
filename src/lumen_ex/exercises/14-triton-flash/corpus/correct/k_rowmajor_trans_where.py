# correct: K loaded row-major as (BLOCK_N, D) and transposed with tl.trans before tl.dot; out-of-range handled with tl.where on loaded values instead of other=
"""Exercise 14: FlashAttention's forward pass as a Triton kernel, K transposed in registers."""

import triton
import triton.language as tl


@triton.jit
def flash_attention_kernel(Q, K, V, Out, Lse,
                           stride_qh, stride_qm, stride_kh, stride_kn, stride_vh, stride_vn,
                           stride_oh, stride_om, stride_lh,
                           L_q, L_k, scale,
                           D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    pid = tl.program_id(0)
    head = tl.program_id(1)
    rm = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rd = tl.arange(0, D)
    rn = tl.arange(0, BLOCK_N)
    row_in = rm[:, None] < L_q

    q = tl.load(Q + head * stride_qh + rm[:, None] * stride_qm + rd[None, :], mask=row_in)
    q = tl.where(row_in, q, 0.0)

    m_run = tl.full((BLOCK_M,), -float("inf"), tl.float32)
    l_run = tl.zeros((BLOCK_M,), tl.float32)
    o_run = tl.zeros((BLOCK_M, D), tl.float32)

    diag = L_k - L_q
    last = L_k
    if CAUSAL:
        last = tl.minimum(pid * BLOCK_M + BLOCK_M + diag, L_k)

    for n0 in range(0, last, BLOCK_N):
        cn = n0 + rn
        col_in = cn[:, None] < L_k                           # (BLOCK_N, 1)
        k = tl.load(K + head * stride_kh + cn[:, None] * stride_kn + rd[None, :], mask=col_in)
        v = tl.load(V + head * stride_vh + cn[:, None] * stride_vn + rd[None, :], mask=col_in)
        k = tl.where(col_in, k, 0.0)
        v = tl.where(col_in, v, 0.0)

        scores = tl.dot(q, tl.trans(k)) * scale               # (BLOCK_M, BLOCK_N)
        allowed = cn[None, :] < L_k
        if CAUSAL:
            allowed = allowed & (cn[None, :] <= rm[:, None] + diag)
        scores = tl.where(allowed, scores, -float("inf"))

        m_next = tl.maximum(m_run, tl.max(scores, axis=1))
        corr = tl.exp(m_run - m_next)
        p = tl.exp(scores - m_next[:, None])
        p = tl.where(allowed, p, 0.0)
        l_run = l_run * corr + tl.sum(p, axis=1)
        o_run = o_run * corr[:, None] + tl.dot(p.to(v.dtype), v)
        m_run = m_next

    lse = m_run + tl.log(l_run)
    o = o_run / l_run[:, None]
    row_ok = rm < L_q
    tl.store(Out + head * stride_oh + rm[:, None] * stride_om + rd[None, :],
             o.to(Out.dtype.element_ty), mask=row_ok[:, None])
    tl.store(Lse + head * stride_lh + rm, lse, mask=row_ok)

# bug: stores Lse = log(l): the running max m is left out of the log-sum-exp
# expect-kind: values
# expect-misconception: lse-without-max
"""FlashAttention forward in Triton."""

import triton
import triton.language as tl


@triton.jit
def flash_attention_kernel(Q, K, V, Out, Lse,
                           stride_qh, stride_qm, stride_kh, stride_kn, stride_vh, stride_vn,
                           stride_oh, stride_om, stride_lh,
                           L_q, L_k, scale,
                           D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    pid_m = tl.program_id(0)
    head = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    row_ok = offs_m < L_q

    q_ptrs = Q + head * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]
    q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0)

    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)

    shift = L_k - L_q
    hi = L_k
    if CAUSAL:
        hi = tl.minimum((pid_m + 1) * BLOCK_M + shift, L_k)
    for start in range(0, hi, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        col_ok = offs_n < L_k
        kt = tl.load(K + head * stride_kh + offs_n[None, :] * stride_kn + offs_d[:, None],
                     mask=col_ok[None, :], other=0.0)
        v = tl.load(V + head * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :],
                    mask=col_ok[:, None], other=0.0)
        s = tl.dot(q, kt) * scale
        visible = col_ok[None, :]
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= offs_m[:, None] + shift)
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new

    o = acc / l_i[:, None]
    tl.store(Out + head * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :],
             o.to(Out.dtype.element_ty), mask=row_ok[:, None])
    tl.store(Lse + head * stride_lh + offs_m, tl.log(l_i), mask=row_ok)

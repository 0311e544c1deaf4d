# correct: online softmax in base 2 (scores pre-multiplied by scale * log2(e), tl.exp2), Lse converted back to natural log
"""Exercise 14: FlashAttention's forward pass as a Triton kernel, exp2 flavour."""

import math

import triton
import triton.language as tl


@triton.jit
def flash_attention_kernel(Q, K, V, Out, Lse,
                           stride_qh, stride_qm, stride_kh, stride_kn, stride_vh, stride_vn,
                           stride_oh, stride_om, stride_lh,
                           L_q, L_k, scale,
                           D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M
    off_h = tl.program_id(1)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)

    q_ptrs = Q + off_h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]
    q = tl.load(q_ptrs, mask=offs_m[:, None] < L_q, other=0.0)

    qk_scale = scale * math.log2(math.e)   # scores in log2 units
    m_i = tl.zeros((BLOCK_M,), dtype=tl.float32) - float("inf")
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, D), dtype=tl.float32)

    shift = L_k - L_q
    hi = L_k
    if CAUSAL:
        hi = min(start_m + BLOCK_M + shift, L_k)

    k_base = K + off_h * stride_kh
    v_base = V + off_h * stride_vh
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        kt = tl.load(k_base + offs_d[:, None] + cols[None, :] * stride_kn,
                     mask=cols[None, :] < L_k, other=0.0)
        v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :],
                    mask=cols[:, None] < L_k, other=0.0)

        qk = tl.dot(q, kt) * qk_scale
        valid = cols[None, :] < L_k
        if CAUSAL:
            valid = valid & (cols[None, :] <= offs_m[:, None] + shift)
        qk = tl.where(valid, qk, float("-inf"))

        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.exp2(m_i - m_ij)
        p = tl.exp2(qk - m_ij[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc += tl.dot(p.to(v.dtype), v)
        m_i = m_ij

    acc = acc / l_i[:, None]
    # m_i is in log2 units: lse = ln(2) * (m_i + log2(l_i))
    lse = (m_i + tl.log2(l_i)) * math.log(2.0)
    row_ok = offs_m < L_q
    tl.store(Out + off_h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :],
             acc.to(Out.dtype.element_ty), mask=row_ok[:, None])
    tl.store(Lse + off_h * stride_lh + offs_m, lse, mask=row_ok)

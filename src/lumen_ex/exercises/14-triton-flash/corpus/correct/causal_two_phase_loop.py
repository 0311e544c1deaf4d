# correct: two-phase causal loop (key blocks wholly visible to every row without a mask, then the diagonal blocks with the mask), inputs upcast to float32 after loading, loop over tl.range
"""Exercise 14: FlashAttention's forward pass as a Triton kernel, causal loop split in two phases."""

import triton
import triton.language as tl


@triton.jit
def flash_attention_kernel(Q, K, V, Out, Lse,
                           stride_qh, stride_qm, stride_kh, stride_kn, stride_vh, stride_vn,
                           stride_oh, stride_om, stride_lh,
                           L_q, L_k, scale,
                           D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_h = tl.program_id(1)
    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)

    q = tl.load(Q + pid_h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :],
                mask=offs_m[:, None] < L_q, other=0.0).to(tl.float32)
    k_ptr = K + pid_h * stride_kh
    v_ptr = V + pid_h * stride_vh

    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)

    shift = L_k - L_q
    if CAUSAL:
        # keys every row of this block sees: j <= m0 + shift (its first row's limit), and j < L_k.
        # Phase 1 covers whole blocks [0, full_end) that need no mask at all.
        lim = tl.minimum(m0 + shift + 1, L_k)
        full_end = tl.maximum(lim, 0) // BLOCK_N * BLOCK_N
        end = tl.minimum(m0 + BLOCK_M + shift, L_k)
    else:
        full_end = L_k // BLOCK_N * BLOCK_N
        end = L_k

    # phase 1: no masking needed
    for start_n in tl.range(0, full_end, BLOCK_N):
        cols = start_n + offs_n
        kt = tl.load(k_ptr + cols[None, :] * stride_kn + offs_d[:, None]).to(tl.float32)
        v = tl.load(v_ptr + cols[:, None] * stride_vn + offs_d[None, :]).to(tl.float32)
        s = tl.dot(q, kt) * scale
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m_i = m_new

    # phase 2: the diagonal blocks (causal) or the ragged tail (L_k not a multiple of BLOCK_N), masked
    for start_n in tl.range(full_end, end, BLOCK_N):
        cols = start_n + offs_n
        kt = tl.load(k_ptr + cols[None, :] * stride_kn + offs_d[:, None],
                     mask=cols[None, :] < L_k, other=0.0).to(tl.float32)
        v = tl.load(v_ptr + cols[:, None] * stride_vn + offs_d[None, :],
                    mask=cols[:, None] < L_k, other=0.0).to(tl.float32)
        s = tl.dot(q, kt) * scale
        ok = cols[None, :] < L_k
        if CAUSAL:
            ok = ok & (cols[None, :] <= offs_m[:, None] + shift)
        s = tl.where(ok, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m_i = m_new

    row_ok = offs_m < L_q
    tl.store(Out + pid_h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :],
             (acc / l_i[:, None]).to(Out.dtype.element_ty), mask=row_ok[:, None])
    tl.store(Lse + pid_h * stride_lh + offs_m, m_i + tl.log(l_i), mask=row_ok)

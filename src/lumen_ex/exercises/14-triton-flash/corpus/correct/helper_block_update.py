# correct: the inner block update (load K/V block, scores, mask, online-softmax rescale) lives in a @triton.jit helper called from the kernel
"""Exercise 14: FlashAttention's forward pass as a Triton kernel, with a helper for one key block."""

import triton
import triton.language as tl


@triton.jit
def _attend_block(acc, m, l, q, K, V, rows, start_n,
                  stride_kn, stride_vn, L_q, L_k, scale,
                  D: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    cols = start_n + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, D)
    in_range = cols < L_k
    k_t = tl.load(K + dims[:, None] + cols[None, :] * stride_kn, mask=in_range[None, :], other=0.0)
    v = tl.load(V + cols[:, None] * stride_vn + dims[None, :], mask=in_range[:, None], other=0.0)

    s = tl.dot(q, k_t) * scale
    if CAUSAL:
        visible = in_range[None, :] & (cols[None, :] <= rows[:, None] + (L_k - L_q))
    else:
        visible = in_range[None, :] & (rows[:, None] >= 0)
    s = tl.where(visible, s, float("-inf"))

    m_new = tl.maximum(m, s.max(axis=1))
    alpha = tl.exp(m - m_new)
    p = tl.exp(s - m_new[:, None])
    l = l * alpha + p.sum(axis=1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return acc, m_new, l


@triton.jit
def flash_attention_kernel(Q, K, V, Out, Lse,
                           stride_qh, stride_qm, stride_kh, stride_kn, stride_vh, stride_vn,
                           stride_oh, stride_om, stride_lh,
                           L_q, L_k, scale,
                           D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    i = tl.program_id(0)
    h = tl.program_id(1)
    rows = i * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    row_mask = rows < L_q
    q = tl.load(Q + h * stride_qh + rows[:, None] * stride_qm + dims[None, :],
                mask=row_mask[:, None], other=0.0)

    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l = tl.full([BLOCK_M], 0.0, dtype=tl.float32)
    acc = tl.full([BLOCK_M, D], 0.0, dtype=tl.float32)

    if CAUSAL:
        n_end = min((i + 1) * BLOCK_M + L_k - L_q, L_k)
    else:
        n_end = L_k
    for start_n in range(0, n_end, BLOCK_N):
        acc, m, l = _attend_block(acc, m, l, q, K + h * stride_kh, V + h * stride_vh, rows, start_n,
                                  stride_kn, stride_vn, L_q, L_k, scale,
                                  D, BLOCK_N, CAUSAL)

    tl.store(Out + h * stride_oh + rows[:, None] * stride_om + dims[None, :],
             (acc / l[:, None]).to(Out.dtype.element_ty), mask=row_mask[:, None])
    tl.store(Lse + h * stride_lh + rows, m + tl.log(l), mask=row_mask)

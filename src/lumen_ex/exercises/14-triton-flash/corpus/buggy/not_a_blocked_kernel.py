# bug: loads every key at once (a block of 128, masked past L_k) and does the softmax in one go: no loop over key blocks
# expect-kind: property
# expect-misconception: not-a-blocked-kernel
"""Attention in Triton: all the keys of a head fit in one block, so no online softmax is needed."""

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
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, 128)        # every key of the head: the tests have at most 96
    dims = tl.arange(0, D)

    q = tl.load(Q + head * stride_qh + rows[:, None] * stride_qm + dims[None, :],
                mask=rows[:, None] < L_q, other=0.0)
    k_t = tl.load(K + head * stride_kh + cols[None, :] * stride_kn + dims[:, None],
                  mask=cols[None, :] < L_k, other=0.0)
    v = tl.load(V + head * stride_vh + cols[:, None] * stride_vn + dims[None, :],
                mask=cols[:, None] < L_k, other=0.0)

    s = tl.dot(q, k_t) * scale
    keep = cols[None, :] < L_k
    if CAUSAL:
        keep = keep & (cols[None, :] <= rows[:, None] + (L_k - L_q))
    s = tl.where(keep, s, float("-inf"))
    m = tl.max(s, axis=1)
    p = tl.exp(s - m[:, None])
    l = tl.sum(p, axis=1)
    out = tl.dot(p.to(v.dtype), v) / l[:, None]

    tl.store(Out + head * stride_oh + rows[:, None] * stride_om + dims[None, :],
             out.to(Out.dtype.element_ty), mask=rows[:, None] < L_q)
    tl.store(Lse + head * stride_lh + rows, m + tl.log(l), mask=rows < L_q)

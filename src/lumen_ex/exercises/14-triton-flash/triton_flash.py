"""Exercise 14: FlashAttention's forward pass as a Triton kernel. Read README.md in this folder first.

The grader launches your kernel itself, over the grid (cdiv(L_q, BLOCK_M), H), and reads Out and Lse
after it. Keep this file to imports of triton and math, constants and @triton.jit functions.
"""

import triton
import triton.language as tl


@triton.jit
def flash_attention_kernel(Q, K, V, Out, Lse,
                           stride_qh, stride_qm, stride_kh, stride_kn, stride_vh, stride_vn,
                           stride_oh, stride_om, stride_lh,
                           L_q, L_k, scale,
                           D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    # TODO: this program's rows: tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M), head tl.program_id(1).
    # TODO: load its q block (BLOCK_M, D), masked where a row is past L_q.
    # TODO: walk the keys in blocks of BLOCK_N: scores = tl.dot(q, k_transposed) * scale, the running
    #       max m, sum l and output acc in float32, rescaled by exp(m_old - m_new) when m grows.
    # TODO: store acc / l into Out and m + log(l) into Lse, masked where a row is past L_q.
    raise NotImplementedError("flash_attention_kernel is not written yet")

# cheat: a Python wrapper that computes attention, beside a kernel that stores nothing useful
import math

import triton
import triton.language as tl


def flash_attention(q, k, v):
    return q  # a wrapper the grader never calls: refused as a function without @triton.jit


@triton.jit
def flash_attention_kernel(Q, K, V, Out, Lse,
                           stride_qh, stride_qm, stride_kh, stride_kn, stride_vh, stride_vn,
                           stride_oh, stride_om, stride_lh,
                           L_q, L_k, scale,
                           D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    tl.store(Lse + tl.program_id(1) * stride_lh + rows, tl.zeros([BLOCK_M], tl.float32) + math.pi, mask=rows < L_q)

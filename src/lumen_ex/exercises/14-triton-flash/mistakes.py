"""Known wrong versions of exercise 14, computed in float64 with torch on the same inputs as the
reference: FlashAttention-2's loop over key blocks with one thing done differently (a keyword knob
of :func:`flash`). When a kernel's Out or Lse differ from the reference, the suite compares them
with each variant and names the one they match.
"""

from __future__ import annotations

import math

import torch

from lumen_ex.author import GENERIC_MISCONCEPTIONS, Variant


def flash(q, k, v, causal, block_n, scale, *, rescale=True, diagonal="right", lse="right"):
    """(out (H, L_q, D), lse (H, L_q)) in float64 by blocks of ``block_n`` keys, with one knob turned.

    rescale=False: the output accumulator is not multiplied by exp(m_old - m_new) when the max grows
    (the running sum is). diagonal: "right" (query i sees keys j <= i + L_k - L_q), "strict" (j < ...),
    "top-left" (j <= i: the offset L_k - L_q left out). lse: "right" (m + log l), "log2" (in base 2, as
    a kernel working with exp2 holds it), "no-max" (log l, the running max left out)."""
    q, k, v = (x.to(torch.float64) for x in (q, k, v))
    H, L_q, D = q.shape
    L_k = k.shape[1]
    offset = {"right": L_k - L_q, "strict": L_k - L_q - 1, "top-left": 0}[diagonal]
    m = torch.full((H, L_q), float("-inf"), dtype=torch.float64)
    l_i = torch.zeros(H, L_q, dtype=torch.float64)
    acc = torch.zeros(H, L_q, D, dtype=torch.float64)
    rows = torch.arange(L_q)[:, None]
    for start in range(0, L_k, block_n):
        cols = torch.arange(start, min(start + block_n, L_k))[None, :]
        s = q @ k[:, cols[0]].transpose(-2, -1) * scale                            # (H, L_q, n)
        if causal:
            s = s.masked_fill(~(cols <= rows + offset), float("-inf"))
        m_new = torch.maximum(m, s.amax(-1))
        m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        alpha = torch.exp(m - m_safe)
        p = torch.exp(s - m_safe[..., None])
        l_i = l_i * alpha + p.sum(-1)
        acc = (acc * alpha[..., None] if rescale else acc) + p @ v[:, cols[0]]
        m = m_new
    out = acc / l_i[..., None]
    value = {"right": m + torch.log(l_i), "log2": (m + torch.log(l_i)) / math.log(2), "no-max": torch.log(l_i)}[lse]
    return out, value


def variants(q, k, v, causal, block_n, scale, *, which=0) -> list[Variant]:
    """Wrong answers for Out (which=0) or Lse (1), most common first."""
    name = ("Out", "Lse")[which]
    cands = [
        ("accumulator-not-rescaled", f"your {name} equals FlashAttention's loop in which the output "
         "accumulator is not rescaled when the running max grows", "when m grows to m_new, multiply acc (and l) by "
         "exp(m - m_new) before adding the new block: acc = acc * alpha[:, None] + tl.dot(p, v)", dict(rescale=False)),
        ("lse-log2", f"your {name} equals the log-sum-exp in base 2", "Lse is a natural log: m + tl.log(l) (a "
         "kernel that works with exp2 and log2(e)-scaled scores must convert back: multiply by ln 2)", dict(lse="log2")),
        ("lse-without-max", f"your {name} equals log(l) without the running max",
         "l sums exp(s - m), so the log-sum-exp is m + log(l)", dict(lse="no-max")),
    ]
    if causal:
        cands += [
            ("causal-strict-diagonal", f"your {name} equals attention in which each query does not see its own "
             "key (j < i instead of j <= i)", "query i sees keys 0 .. i + L_k - L_q, the diagonal included: use <=",
             dict(diagonal="strict")),
            ("causal-top-left", f"your {name} equals attention with the causal mask aligned top-left (keys j <= i)",
             "query i sits at key position i + L_k - L_q (aligned bottom-right, as in exercise 5)",
             dict(diagonal="top-left")),
        ]
    out = []
    for mistake, sentence, fix, knobs in cands:
        value = flash(q, k, v, causal, block_n, scale, **knobs)[which]
        out.append(Variant(mistake, sentence, value, fix))
    return out


# Every mistake this suite names, by id (docs/authoring.md).
CATALOGUE = {
    "accumulator-not-rescaled": "the output accumulator not rescaled when the running max grows",
    "lse-log2": "Lse in base 2",
    "lse-without-max": "Lse without the running max",
    "causal-strict-diagonal": "the causal mask hides the diagonal",
    "causal-top-left": "the causal mask aligned top-left",
    "boundary-masks-missing": "loads or stores without masks: lengths that are not a multiple of the block go wrong",
    "k-not-transposed": "K loaded as (BLOCK_N, D) and given to tl.dot untransposed",
    "rows-not-written": "rows of Out or Lse the kernel's stores never wrote",
    "not-a-blocked-kernel": "no matrix product in a loop over key blocks",
    "future-blocks-computed": "with CAUSAL, the key blocks in the future still visited",
    **{k: v for k, v in GENERIC_MISCONCEPTIONS.items() if k in ("unverifiable-source", "dtype-downcast", "dtype-upcast")},
}

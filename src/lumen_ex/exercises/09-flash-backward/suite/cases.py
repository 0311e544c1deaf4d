"""Inputs of exercise 9's suite: q, k, v and d_out drawn from the seed in float64, and the forward's
``out`` and ``lse`` computed from them in float64 (exercise 5's forward, the plain way, in chunks of
query rows so that a long case never holds an (L_q, L_k) float64 matrix), then cast for the call:
``out`` to the inputs' dtype, ``lse`` to float32 for float16/bfloat16 inputs and to q's dtype otherwise.
Also the float64 truth of a long call on a few sampled rows, without any whole matrix.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import torch

from lumen_ex.author import inputs

# Every axis a distinct size. L_q = 7 and L_k = 17 are multiples of neither block_size 3 nor 4; with
# causal=True the first query sits at key position 10, so block_size 3 gives key blocks that cross
# the diagonal and one ({15, 16}) entirely in the first query block's future. d_k and d_v are at
# least L_q, so a wrong dv (or dk) determines the weights P (or dS) it was built from: the picture.
SIZES = {"B": 2, "H": 3, "L_q": 7, "L_k": 17, "d_k": 12, "d_v": 10}
# q and k are drawn at half the unit scale: scaled scores of standard deviation 1/4. Two known
# mistakes take exp of scores that lse no longer shifts (exp(s), exp(q k^T - lse)); with unit q and k
# their values reach the hundreds, and float32 arithmetic on them strayed up to 3.6 tolerances from
# the float64 mistake at some seeds (it must stay within 1 to be named). At half scale the worst over
# 30 seeds is 0.39 of it, and a query's largest weight is still about 2.4 times its smallest
# (the median over queries): every known mistake stays 1e4 tolerances or more from the truth.
QK_SCALE = 0.5
CHUNK = 512                                  # query rows per step of the long forward


def lse_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of the lse the learner is given: float32 for float16/bfloat16 inputs, else q's."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def future(rows: torch.Tensor, cols: torch.Tensor, L_q: int, L_k: int) -> torch.Tensor:
    """Bool (n_rows, n_cols): key ``cols[j]`` is after query ``rows[i]``'s position (bottom-right)."""
    return cols[None, :] > rows[:, None] + (L_k - L_q)


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Exercise 5's (out (..., L_q, d_v), lse (..., L_q)) in float64, CHUNK query rows at a time."""
    return forward_both(q, k, v, (causal,))[causal]


def forward_both(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, which=(False, True)) -> dict:
    """{causal: (out, lse)} for each flag in ``which``, in float64, from one pass over the scores:
    a long case's two forwards share each chunk's q k^T and its exp. Each row is shifted by its
    maximum over all keys, also for causal (the suite's scores are of order 1, so no visible key's
    exp comes near underflow)."""
    L_q, L_k = q.shape[-2], k.shape[-2]
    scale = 1 / math.sqrt(q.shape[-1])
    parts: dict = {c: ([], []) for c in which}
    for r0 in range(0, L_q, CHUNK):
        rows = torch.arange(r0, min(r0 + CHUNK, L_q))
        s = q[..., rows, :] @ k.transpose(-2, -1) * scale                 # (..., n, L_k)
        m = s.amax(dim=-1, keepdim=True)                                   # (..., n, 1)
        e = torch.exp(s - m)                                               # (..., n, L_k)
        for c in which:
            w = e.masked_fill(future(rows, torch.arange(L_k), L_q, L_k), 0.0) if c else e
            total = w.sum(dim=-1, keepdim=True)                            # (..., n, 1)
            parts[c][0].append(w @ v / total)                              # (..., n, d_v)
            parts[c][1].append((m + torch.log(total))[..., 0])             # (..., n)
    return {c: (torch.cat(o, dim=-2), torch.cat(lse, dim=-1)) for c, (o, lse) in parts.items()}


@dataclass
class BackwardCase:
    """q, k, v, d_out (float64), the forward's out and lse on them (float64), and every axis's size."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    d_out: torch.Tensor
    causal: bool
    sizes: dict[str, int]
    batch_axes: tuple[str, ...] = field(default_factory=tuple)
    out: torch.Tensor | None = None       # computed from q, k, v when not given
    lse: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.out is None or self.lse is None:
            self.out, self.lse = forward(self.q, self.k, self.v, self.causal)

    def axes(self, *last: str) -> tuple[str, ...]:
        return (*self.batch_axes, *last)

    def args(self, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """(q, k, v, out, lse, d_out) as the learner gets them."""
        return (self.q.to(dtype), self.k.to(dtype), self.v.to(dtype), self.out.to(dtype),
                self.lse.to(lse_dtype(dtype)), self.d_out.to(dtype))

    def rounded(self, dtype: torch.dtype) -> BackwardCase:
        """The same case with q, k, v and d_out rounded to ``dtype`` (kept in float64), out and lse
        recomputed exactly from them: the truth then sees the inputs the learner gets."""
        q, k, v, d_out = (t.to(dtype).to(torch.float64) for t in (self.q, self.k, self.v, self.d_out))
        return BackwardCase(q, k, v, d_out, self.causal, self.sizes, self.batch_axes)


def backward_case(seed: int, *, causal: bool = False, batch_axes=("B", "H"), bound: float | None = None,
                  qk_scale: float = QK_SCALE, **sizes: int) -> BackwardCase:
    """Seeded q, k (randn times ``qk_scale``), v (as exercise 1's attention_case) and unit-variance d_out
    (a second stream); ``bound`` clamps all four to [-bound, bound] before the scale (the dtype tests:
    inputs.DTYPE_BOUND)."""
    s = {**SIZES, **sizes}
    att = inputs.attention_case(seed, batch_axes=batch_axes, bound=bound, **s)
    q, k = att.q * qk_scale, att.k * qk_scale
    d_out = inputs.randn(inputs.generator(seed + 7), *[s[a] for a in batch_axes], s["L_q"], s["d_v"])
    if bound is not None:
        d_out = d_out.clamp(-bound, bound)
    return BackwardCase(q, k, att.v, d_out, causal, dict(att.sizes), tuple(batch_axes))


@functools.lru_cache(maxsize=8)
def both_cases(seed: int, **sizes: int) -> tuple[BackwardCase, BackwardCase]:
    """The non-causal and the causal case of the same q, k, v, d_out (a long test calls both), their
    forwards computed in one pass.

    Kept for the next call with the same seed and sizes (a function of them alone): a grading
    process runs the suite again for every file of a class with one seed (src/lumen_ex/harness/kept_session.py),
    and the float64 forward at L = 4096 is most of this test's own work. Nothing writes into them:
    the learner gets copies through the sandbox's pipe, and the suite only reads them."""
    one = backward_case(seed, causal=False, **sizes)
    fwd = forward_both(one.q, one.k, one.v)
    plain, causal = (BackwardCase(one.q, one.k, one.v, one.d_out, c, one.sizes, one.batch_axes, *fwd[c])
                     for c in (False, True))
    return plain, causal


def sampled_truth(case: BackwardCase, q_rows: torch.Tensor, k_rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The float64 dq at the query rows ``q_rows`` and dk, dv at the key rows ``k_rows`` of a long
    case: (..., n, d_k), (..., n, d_k), (..., n, d_v), from one strip of P each (never (L_q, L_k))."""
    q, k, v, d_out, out, lse = case.q, case.k, case.v, case.d_out, case.out, case.lse
    L_q, L_k = q.shape[-2], k.shape[-2]
    scale = 1 / math.sqrt(q.shape[-1])
    D = (d_out * out).sum(dim=-1)                                          # (..., L_q)
    all_q, all_k = torch.arange(L_q), torch.arange(L_k)

    def strip(rows: torch.Tensor, cols: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = q[..., rows, :] @ k[..., cols, :].transpose(-2, -1) * scale    # (..., n_rows, n_cols)
        if case.causal:
            s = s.masked_fill(future(rows, cols, L_q, L_k), float("-inf"))
        p = torch.exp(s - lse[..., rows, None])
        dp = d_out[..., rows, :] @ v[..., cols, :].transpose(-2, -1)
        return p, p * (dp - D[..., rows, None])

    _, ds_rows = strip(q_rows, all_k)                                      # (..., n, L_k)
    p_cols, ds_cols = strip(all_q, k_rows)                                 # (..., L_q, n)
    dq = ds_rows @ k * scale
    dk = ds_cols.transpose(-2, -1) @ q * scale
    dv = p_cols.transpose(-2, -1) @ d_out
    return dq, dk, dv

"""Hidden inputs for exercise 8 (attention_backward), the expected gradients, and the pictures.

Every case is seeded unit-variance q, k, v and d_out in float64 on the CPU, every axis a distinct
size (a square case names its one length L). The expected gradients come from torch.autograd, run
here in the trusted harness on the float64 forward pass (the learner's worker has autograd off):
the reference's hand-written backward is checked against them by `lumen-ex dev check` like any
submission.

The pictures: a gradient is a (..., L, d) tensor, whose columns are features, but the mistakes of
this exercise live in dS and P, which are (L_q, L_k). With L_k <= d_k the keys' rows are linearly
independent, so dq = dS @ k / sqrt(d_k) can be solved for dS exactly: dS = dq @ pinv(k) * sqrt(d_k).
A wrong dq is drawn as the dS it implies, beside the right dS (and a wrong dk, through q, as dS; a
wrong dv, through d_out, as P). The default sizes satisfy L_k <= d_k, L_q <= d_k and L_q <= d_v.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from lumen_ex.author import Tolerance, inputs, pictures

DEFAULT_SIZES = {"B": 2, "H": 3, "L_q": 5, "L_k": 7, "d_k": 8, "d_v": 6}
# The low-precision tests: inputs clamped to [-1.5, 1.5] and d_out halved keep bfloat16 arithmetic below
# 0.2 of its tolerance (the reference, float32-inside code and the rowsum(d_out * out) identity, 150
# seeds); d_k = 16 makes 1/sqrt(d_k) = 1/4, so a scale missing or applied twice is a factor 4 off.
DTYPE_SIZES = {"d_k": 16, "d_v": 4}
DTYPE_BOUND = 1.5
DTYPE_D_OUT = 0.5


@dataclass
class BackwardCase:
    """q, k, v, d_out in float64, the causal flag, and the size of every named axis."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    d_out: torch.Tensor
    causal: bool
    sizes: dict[str, int]
    batch_axes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def square(self) -> bool:
        return self.q.size(-2) == self.k.size(-2)

    def axes(self, length: str, width: str) -> tuple[str, ...]:
        """The axis names of a tensor (..., length, width); L for both lengths of a square case."""
        return (*self.batch_axes, "L" if self.square else length, width)

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return self.q, self.k, self.v, self.d_out

    def args(self, dtype: torch.dtype) -> tuple:
        """The call's positional arguments: q, k, v, d_out in ``dtype``, and causal."""
        return (*(t.to(dtype) for t in self.tensors()), self.causal)

    def rounded(self, dtype: torch.dtype) -> "BackwardCase":
        """The same case with the tensors rounded to ``dtype`` (kept in float64): the reference then
        sees exactly the inputs the learner gets."""
        q, k, v, d_out = (t.to(dtype).to(torch.float64) for t in self.tensors())
        return BackwardCase(q, k, v, d_out, self.causal, self.sizes, self.batch_axes)

    def expected(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(dq, dk, dv) by torch.autograd, in float64."""
        q, k, v = (t.clone().requires_grad_() for t in (self.q, self.k, self.v))
        with torch.enable_grad():
            out = forward(q, k, v, self.causal)[0]
            dq, dk, dv = torch.autograd.grad(out, (q, k, v), self.d_out)
        return dq.detach(), dk.detach(), dv.detach()


def future(L_q: int, L_k: int) -> torch.Tensor:
    """(L_q, L_k) bool, True where a key is in a query's future (bottom-right: query i at L_k - L_q + i)."""
    return torch.arange(L_k)[None, :] > torch.arange(L_q)[:, None] + (L_k - L_q)


def forward(q, k, v, causal: bool):
    """Exercise 1's attention (output, P), with the bottom-right causal mask when ``causal``."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))            # (..., L_q, L_k)
    if causal:
        scores = scores.masked_fill(future(q.size(-2), k.size(-2)), float("-inf"))
    p = torch.softmax(scores, dim=-1)                                    # (..., L_q, L_k)
    return p @ v, p


def case(seed: int, *, batch_axes=("B", "H"), causal: bool = False, bound: float | None = None,
         d_out_scale: float = 1.0, **sizes: int) -> BackwardCase:
    """Seeded inputs: q, k, v from inputs.attention_case, d_out from a stream of its own."""
    s = {**DEFAULT_SIZES, **sizes}
    base = inputs.attention_case(seed, batch_axes=batch_axes, bound=bound, **s)
    d_out = inputs.randn(inputs.generator(seed + 1), *base.q.shape[:-1], s["d_v"])   # (..., L_q, d_v)
    if bound is not None:
        d_out = d_out.clamp(-bound, bound)
    used = {a: s[a] for a in batch_axes}
    if s["L_q"] == s["L_k"]:
        used["L"] = s["L_q"]
    else:
        used.update(L_q=s["L_q"], L_k=s["L_k"])
    used.update(d_k=s["d_k"], d_v=s["d_v"])
    return BackwardCase(base.q, base.k, base.v, d_out * d_out_scale, causal, used, tuple(batch_axes))


def dtype_case(seed: int, causal: bool = True) -> BackwardCase:
    """The low-precision tests' inputs (see DTYPE_SIZES)."""
    return case(seed, causal=causal, bound=DTYPE_BOUND, d_out_scale=DTYPE_D_OUT, **DTYPE_SIZES)


# -------------------------------------------------------------------------------------------------
# Pictures: a wrong gradient drawn as the dS (or P) it implies


def _solve(got: torch.Tensor, basis: torch.Tensor) -> torch.Tensor | None:
    """X with got = X @ basis, for basis (..., n, d) with n <= d (rows independent); None otherwise."""
    if basis.size(-2) > basis.size(-1):
        return None
    return got @ torch.linalg.pinv(basis)                                # (..., L, n)


def picture(failure, which: int, got: torch.Tensor, case: BackwardCase, tol: Tolerance):
    """Attach to ``failure`` the (L_q, L_k) matrix that the learner's gradient ``which`` (0 dq, 1 dk,
    2 dv) implies beside the right one: dS for dq and dk, P for dv. Nothing when the sizes do not
    allow solving for it or the learner's tensor has the wrong shape."""
    expected = case.expected()[which]
    if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(expected.shape):
        return failure
    g = torch.nan_to_num(got.detach().to(torch.float64), nan=0.0, posinf=0.0, neginf=0.0)
    root = math.sqrt(case.q.size(-1))
    _, p = forward(case.q, case.k, case.v, case.causal)                  # (..., L_q, L_k)
    dp = case.d_out @ case.v.transpose(-2, -1)                           # (..., L_q, L_k)
    ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))                   # (..., L_q, L_k)
    if which == 0:
        mine, right = _solve(g, case.k), ds
        what = "dS implied by your dq (dq = dS @ k / sqrt(d_k), solved for dS)"
    elif which == 1:
        mine, right = _solve(g, case.q), ds
        what = "dS implied by your dk (dk = dS^T @ q / sqrt(d_k), solved for dS)"
    else:
        mine, right = _solve(g, case.d_out), p
        what = "P implied by your dv (dv = P^T @ d_out, solved for P)"
    if mine is None:
        return failure
    if which == 2:
        mine = mine.transpose(-2, -1)                                    # (..., L_q, L_k)
    else:
        mine = (mine * root).transpose(-2, -1) if which == 1 else mine * root
    # Solving amplifies the learner's rounding: cells are marked different at 10x the tolerance.
    return pictures.attach(failure, mine, right, what=what, axes=(*case.batch_axes, "L_q", "L_k"),
                           atol=10 * tol.atol, rtol=10 * tol.rtol, kind="weights" if which == 2 else "gradient")

"""Hidden inputs for exercise 12 (speculative_verify).

A value case is built from a fixed *plan*, not from the seed: for every sequence, the position of
its first rejected draft (or None: all K accepted). The seed draws the distributions, the drafted
tokens and the uniforms within that plan:

- a draft meant to be accepted gets u below its ratio min(1, p(x) / q(x)), one meant to be
  rejected gets u above it; the draft right after a first rejection is always one the ratio would
  accept (so that counting past the rejection changes the count), later ones are a coin flip;
- the drafted token x is drawn from the draft's distribution q, among the tokens whose ratio leaves
  room for the planned decision;
- every uniform keeps a margin from every boundary that the right answer or a known mistake uses
  (the ratios p/q, q/p and the shifted p_{i+1}/q, and the cumulative sums of the residuals,
  normalised or not, and of the target's rows): MARGIN[dtype], at least the contract's 1e-4, so any
  correct order of operations, in float32 or wider, makes the same decisions, and a known mistake
  makes the decisions its float64 variant makes. Half-precision cases keep 0.012: bfloat16's 8-bit
  significand puts a ratio near 1 off by up to 0.004 and a cumulative sum of 4 terms by up to 0.008;
- at a planned rejection the last uniform stays below the residual's mass sum(max(0, p - q)), so
  that the un-normalised residual of the known mistake still gives a token.

Every case is then checked against the known mistakes (src/lumen_ex/exercises/12-speculative-verify/mistakes.py):
each mistake that the plan allows to show (a bonus token needs a row with every draft accepted, a
residual a rejected row, counting past a rejection an accepted draft after one) must change the
answer, the others must not, and no two mistakes may give the same wrong answer. A draw that fails
is drawn again from the same generator, so the case, and every verdict on it, is a function of the
seed alone, and every verdict is the same at every seed.

Half-precision cases (float16, bfloat16) give every probability as a multiple of 1/128, so that the
rows still sum to exactly 1 in the learner's dtype; their uniforms are rounded to the dtype before
the margins are checked. The reference always sees exactly the values the learner receives.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import torch

from lumen_ex.author import exercise, inputs

mistakes = exercise(__file__).mistakes
ref = exercise(__file__).reference

MARGIN = {torch.float64: 1e-3, torch.float32: 1e-3, torch.float16: 0.012, torch.bfloat16: 0.012}
QUANTUM = {torch.float16: 1 / 128, torch.bfloat16: 1 / 128}
TEMPERATURE = 1.3          # the spread of the random distributions: softmax(1.3 * randn)
ATTEMPTS = 60


@dataclass
class SpecCase:
    """One verification batch in float64 (draft_tokens int64), as rounded to the dtype under test."""

    draft_tokens: torch.Tensor           # (B, K) int64
    draft_probs: torch.Tensor            # (B, K, V)
    target_probs: torch.Tensor           # (B, K + 1, V)
    uniforms: torch.Tensor               # (B, K + 1)
    plan: tuple = ()                     # per sequence: its first rejected position, or None
    sizes: dict[str, int] = field(default_factory=dict)

    def tensors(self) -> list[torch.Tensor]:
        return [self.draft_tokens, self.draft_probs, self.target_probs, self.uniforms]

    def args(self, dtype: torch.dtype) -> list[torch.Tensor]:
        """The arguments as the learner gets them, as new tensors: floats in ``dtype``, the tokens int64."""
        return [t.to(dtype, copy=True) if t.is_floating_point() else t.clone() for t in self.tensors()]

    def fresh(self) -> tuple:
        """Float64 copies, for the reference and the variants."""
        return tuple(t.clone() for t in self.tensors())


def _distributions(gen: torch.Generator, n: int, V: int, quantum: float | None) -> torch.Tensor:
    """n random distributions over V tokens (n, V), every entry positive; multiples of ``quantum``
    summing to exactly 1 when given (the remainder of the rounding goes to each row's largest entry)."""
    w = torch.softmax(TEMPERATURE * inputs.randn(gen, n, V), dim=-1)              # (n, V)
    if quantum is None:
        return w
    total = round(1 / quantum)
    counts = torch.clamp(torch.floor(w * total), min=1)                           # (n, V)
    largest = counts.argmax(dim=-1, keepdim=True)                                 # (n, 1)
    counts.scatter_add_(-1, largest, total - counts.sum(dim=-1, keepdim=True))
    return counts * quantum


def _cdf(probs: torch.Tensor) -> list[float]:
    """The cumulative sums of a row (V,), as a list."""
    return probs.cumsum(dim=-1).tolist()


def _residual(p: torch.Tensor, q: torch.Tensor, normalise: bool = True) -> torch.Tensor:
    r = torch.clamp(p - q, min=0.0)
    return r / r.sum(dim=-1, keepdim=True).clamp_min(1e-300) if normalise else r


def _draw_u(gen: torch.Generator, lo: float, hi: float, avoid: list[float], margin: float,
            dtype: torch.dtype, prefer=None) -> float | None:
    """A uniform in [lo, hi], as rounded to ``dtype``, at least ``margin`` from every value of
    ``avoid``, and one for which ``prefer(u)`` holds if one of the first 100 candidates does; None
    when none of 200 candidates fits."""
    if hi - lo < margin:
        return None
    cands = lo + (hi - lo) * torch.rand(200, generator=gen, dtype=torch.float64)     # (200,)
    for attempt, u in enumerate(cands.to(dtype).to(torch.float64).tolist()):
        if lo <= u <= hi and 0.0 <= u < 1.0 and all(abs(u - a) >= margin for a in avoid):
            if prefer is None or attempt >= 100 or prefer(u):
                return u
    return None


def _pick_token(gen: torch.Generator, q: torch.Tensor, allowed: torch.Tensor) -> int | None:
    """A token drawn from q restricted to ``allowed`` (bool (V,)), as the draft would draw it."""
    w = q * allowed
    if float(w.sum()) <= 0:
        return None
    return int(torch.multinomial(w, 1, generator=gen))


def _row(gen: torch.Generator, first_reject: int | None, K: int, V: int, dtype: torch.dtype):
    """One sequence that follows its plan: (tokens (K,), q (K, V), p (K + 1, V), u (K + 1,)), or None."""
    m, quantum = MARGIN[dtype], QUANTUM.get(dtype)
    q = _distributions(gen, K, V, quantum)                                            # (K, V)
    p = _distributions(gen, K + 1, V, quantum)                                        # (K + 1, V)
    if quantum is None:                                                               # what the learner gets
        q, p = q.to(dtype).to(torch.float64), p.to(dtype).to(torch.float64)
    residual = _residual(p[:K], q)                                                    # (K, V), normalised
    raw = _residual(p[:K], q, normalise=False)                                        # (K, V)
    shifted = _residual(p[1:], q)                                                     # (K, V): p_{i+1} - q_i
    cdf_res, cdf_raw, cdf_shift, cdf_p = _cdf(residual), _cdf(raw), _cdf(shifted), _cdf(p)
    ratios = (p[:K] / q).tolist()                                                     # (K, V)
    inverse = (q / p[:K]).tolist()
    shifted_ratios = (p[1:] / q).tolist()
    tokens, us = [], []
    for i in range(K):
        if first_reject is None or i < first_reject or i == first_reject + 1:
            accept = True
        elif i == first_reject:
            accept = False
        else:
            accept = bool(torch.rand((), generator=gen) < 0.5)
        ratio = torch.clamp(p[i] / q[i], max=1.0)                                     # (V,)
        x = _pick_token(gen, q[i], ratio >= 4 * m if accept else ratio <= 1 - 4 * m)
        if x is None:
            return None
        r = min(1.0, ratios[i][x])
        avoid = [ratios[i][x], inverse[i][x], shifted_ratios[i][x], *cdf_res[i][:-1]]
        u = _draw_u(gen, 0.0, r - m, avoid, m, dtype) if accept else _draw_u(gen, r + m, 1 - m, avoid, m, dtype)
        if u is None:
            return None
        tokens.append(x)
        us.append(u)
    avoid = [b for rows in (cdf_res, cdf_raw, cdf_shift, cdf_p) for row in rows for b in row[:-1]]
    hi = 1 - m if first_reject is None else cdf_raw[first_reject][-1] - m
    u = _draw_u(gen, 0.0, hi, avoid, m, dtype, prefer=_telling(cdf_res, cdf_raw, cdf_p, first_reject))
    if u is None:
        return None
    return torch.tensor(tokens, dtype=torch.int64), q, p, torch.tensor([*us, u], dtype=torch.float64)


def _telling(cdf_res, cdf_raw, cdf_p, first_reject: int | None):
    """For the last uniform of a sequence: does u tell the right token apart from those of the mistakes
    that sample another distribution for this sequence? (A u that does is drawn when there is one.)"""
    K = len(cdf_res)
    if first_reject is None:
        right, others = cdf_p[K], [cdf_res[K - 1], cdf_p[K - 1]]
    else:
        right, others = cdf_res[first_reject], [cdf_raw[first_reject], cdf_p[first_reject]]

    def tells(u: float) -> bool:
        token = bisect.bisect_right(right, u)
        return token != 0 and all(bisect.bisect_right(other, u) != token for other in others)
    return tells


def required(plan: tuple, K: int) -> set[str]:
    """The known mistakes that this plan lets show."""
    need = {"ratio-inverted", "target-shifted"}
    if any(r is None for r in plan):
        need |= {"no-bonus-token", "all-accepted-counted-zero"}
    if any(r is not None for r in plan):
        need |= {"residual-not-normalised", "target-not-residual", "acceptance-uniform-reused"}
    if any(r is not None and r < K - 1 for r in plan):
        need |= {"continued-after-rejection"}
    return need


def problems(case: SpecCase) -> list[str]:
    """Why this case cannot serve (empty when it can): a mistake the plan allows that does not show, one
    it does not allow that shows, or two mistakes with the same wrong answer."""
    args = case.fresh()
    n, nxt = ref.speculative_verify(*args)
    need = required(case.plan, case.sizes["K"])
    found, wrong_n, wrong_next = [], [], []
    for ident, knobs, (vn, vnext) in mistakes.all_outcomes(*args):
        same_n, same_next = torch.equal(vn, n), torch.equal(vnext, nxt)
        shown = not (same_n and same_next)
        if shown != (ident in need):
            found.append(f"{ident} {knobs} {'shows' if shown else 'does not show'}")
        if not same_n:
            wrong_n.append((ident, vn))
        elif not same_next:
            wrong_next.append((ident, vnext))
    for wrong in (wrong_n, wrong_next):
        for a in range(len(wrong)):
            for b in range(a):
                if wrong[a][0] != wrong[b][0] and torch.equal(wrong[a][1], wrong[b][1]):
                    found.append(f"{wrong[a][0]} and {wrong[b][0]} agree")
    return found


def build(seed: int, plan: tuple, *, K: int, V: int, dtype: torch.dtype = torch.float32) -> SpecCase:
    """A case that follows ``plan`` (one entry per sequence: the position of its first rejected draft,
    or None), K drafts per sequence over V tokens, for inputs in ``dtype``."""
    gen = inputs.generator(seed)
    sizes = {"B": len(plan), "K": K, "K+1": K + 1, "V": V}
    for _ in range(ATTEMPTS):
        rows = [_row(gen, r, K, V, dtype) for r in plan]
        if any(row is None for row in rows):
            continue
        tokens, q, p, u = (torch.stack(parts) for parts in zip(*rows))
        case = SpecCase(tokens, q, p, u, tuple(plan), sizes)
        if not problems(case):
            return case
    raise RuntimeError(f"no case for plan {plan} at seed {seed} in {ATTEMPTS} attempts")


# -------------------------------------------------------------------------------------------------
# The statistical case: one pair of draft and target distributions, many sequences

# K = 2 drafts over V = 6 tokens. The draft's and the target's distributions disagree a lot (the
# draft is accepted with probability sum(min(p, q)) = 0.6 and 0.45 at its two positions), which is
# what makes every known mistake change the emitted tokens' distribution by a wide margin.
STAT_Q = ((0.30, 0.05, 0.25, 0.10, 0.20, 0.10),
          (0.10, 0.30, 0.05, 0.25, 0.10, 0.20))
STAT_P = ((0.10, 0.25, 0.05, 0.30, 0.10, 0.20),
          (0.25, 0.10, 0.20, 0.05, 0.30, 0.10),
          (0.05, 0.10, 0.30, 0.20, 0.25, 0.10))
STAT_N = 4000
STAT_MARGIN = 1e-4           # the contract's


def stat_case(seed: int) -> SpecCase:
    """STAT_N sequences with the same distributions STAT_Q, STAT_P: drafted tokens drawn from the draft
    by inverse CDF, uniforms uniform on [0, 1) but redrawn where one falls within STAT_MARGIN of a
    boundary it decides by (the contract; the suite's docstring bounds what this changes)."""
    gen = inputs.generator(seed)
    q = torch.tensor(STAT_Q, dtype=torch.float64)                                   # (K, V)
    p = torch.tensor(STAT_P, dtype=torch.float64)                                   # (K + 1, V)
    (K, V), N = q.shape, STAT_N
    w = torch.rand(N, K, generator=gen, dtype=torch.float64)
    tokens = (q.cumsum(dim=-1).unsqueeze(0) <= w.unsqueeze(-1)).sum(dim=-1)        # (N, K) drawn from q
    ratio = torch.clamp(p[:K].gather(-1, tokens.T).T / q.gather(-1, tokens.T).T, max=1.0)   # (N, K)
    cdfs = torch.stack([_residual(p[i], q[i]) for i in range(K)] + [p[K]]).cumsum(dim=-1)[:, :-1]
    bounds = torch.cat([ratio, cdfs.reshape(1, -1).expand(N, -1)], dim=1)           # (N, K + K * (V - 1) + ...)
    u = torch.rand(N, K + 1, generator=gen, dtype=torch.float64)
    for _ in range(20):
        near = torch.zeros(N, K + 1, dtype=torch.bool)
        near[:, :K] = (u[:, :K] - ratio).abs() < STAT_MARGIN
        near[:, K] = ((u[:, K:] - bounds[:, K:]).abs() < STAT_MARGIN).any(dim=-1)
        if not bool(near.any()):
            break
        u = torch.where(near, torch.rand(N, K + 1, generator=gen, dtype=torch.float64), u)
    sizes = {"B": N, "K": K, "K+1": K + 1, "V": V}
    return SpecCase(tokens, q.expand(N, K, V).clone(), p.expand(N, K + 1, V).clone(), u, (), sizes)

"""Seeded hidden inputs, generated on the CPU in float64 and cast for the device under test.

Every axis gets a distinct size (so a swapped axis can be named), values are unit-variance randn
(so a missing 1/sqrt(d_k) is visible: saturated inputs would hide it), and random masks keep at
least one allowed and one forbidden key in every row (a row with no allowed key is outside the
exercise contract). The same seed gives bitwise-identical inputs on every machine and device.

Example (exercise 1's suite)::

    case = inputs.attention_case(seed, mask="full")      # float64 q, k, v, mask; case.sizes names every axis
    q, k, v = case.cast(torch.float16)                   # what the learner's code is given
    gen = inputs.generator(seed + 7)                     # a second stream, for whatever else the test draws
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


def generator(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed``: the same draws on every machine.

    Example (exercise 1's gradient test)::

        gen = inputs.generator(seed + 7)      # another stream than the case's, which uses seed
        g_out, g_w = inputs.randn(gen, *exp_out.shape), inputs.randn(gen, *exp_w.shape)"""
    return torch.Generator().manual_seed(int(seed))


def randn(gen: torch.Generator, *shape: int) -> torch.Tensor:
    """Unit-variance randn of ``shape``, in float64 on the CPU, drawn from ``gen``.

    Example (exercise 4's gradient test)::

        g = inputs.randn(inputs.generator(seed + 7), *expected.shape)"""
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def _forced_hidden(n: int, i: int, L_k: int) -> int:
    """The key random_mask always hides from row i of its n-th (L_q, L_k) slice."""
    return (i + n + 1 + (L_k - 1) // 2) % L_k


def random_mask(gen: torch.Generator, *shape: int, p: float = 0.6) -> torch.Tensor:
    """Bool (..., L_q, L_k), at random, with one allowed and one hidden key forced in every row.

    The forced keys move with the row and with the leading (batch, head) index: every row of the
    mask and of its inverse keeps a True, and no key is hidden from every query or from every head
    at once. A key hidden all down a column (or across all heads) would turn a softmax over the
    queries (or the heads) into NaN for every output row alike, and those two mistakes could then
    not be told apart.

    Example::

        mask = inputs.random_mask(inputs.generator(seed), 2, 3, 5, 7)     # bool (B, H, L_q, L_k)"""
    mask = torch.rand(*shape, generator=gen, dtype=torch.float64) < p
    L_q, L_k = shape[-2], shape[-1]
    hide_at = _forced_hidden(0, 0, L_k)     # never 0 mod L_k (L_k >= 2): the two forced keys differ

    def first_not_hiding(start: torch.Tensor, i: torch.Tensor | int, j: torch.Tensor, count: int) -> tuple[torch.Tensor, ...]:
        """Of ``count`` consecutive rows (or slices) from ``start``, the first of which forces key
        (i + start + hide_at) % L_k hidden and each next one the key after: the index of the first that
        does not hide key j (0 or 1: two consecutive ones differ), and whether there is one."""
        first = (i + start + hide_at) % L_k != j
        return torch.where(first, 0, 1), first | (count > 1 and L_k > 1)

    # Every row forces one allowed key, (i + n) % L_k, and one hidden key, (i + n + hide_at) % L_k,
    # for row i of the n-th (L_q, L_k) slice. (Vectorised: the same mask as setting them row by row.)
    flat = mask.reshape(-1, L_q, L_k)                                        # (N, L_q, L_k), a view
    n = torch.arange(flat.shape[0]).view(-1, 1).expand(-1, L_q)              # (N, L_q)
    i = torch.arange(L_q).view(1, -1).expand(flat.shape[0], -1)              # (N, L_q)
    flat[n, i, (i + n) % L_k] = True
    flat[n, i, (i + n + hide_at) % L_k] = False
    # A column with no allowed query (when L_q < L_k the forced keys do not reach every key):
    # allow it in the first row whose forced hidden key is another one.
    cn, cj = (~flat.any(dim=1)).nonzero(as_tuple=True)                       # (slice, key) pairs
    row, found = first_not_hiding(cn, 0, cj, L_q)
    flat[cn[found], row[found], cj[found]] = True
    if len(shape) >= 3:      # a (query, key) hidden from every head of one batch item: allow it in one
        H = shape[-3]
        heads = mask.reshape(-1, H, L_q, L_k)                                # (B, H, L_q, L_k), a view
        hb, hi, hj = (~heads.any(dim=1)).nonzero(as_tuple=True)             # (batch item, query, key)
        h, found = first_not_hiding(hb * H, hi, hj, H)
        heads[hb[found], h[found], hi[found], hj[found]] = True
    return mask


# The dtype tests clamp their unit-variance inputs to +-2: float16 and bfloat16 rounding then stays
# below ~0.5 of their tolerance at every seed (it reached 0.92 on randn tails; docs/tolerances.md).
DTYPE_BOUND = 2.0


def _bounded(x: torch.Tensor, bound: float | None) -> torch.Tensor:
    return x if bound is None else x.clamp(-bound, bound)


@dataclass
class AttentionCase:
    """q, k, v (and an optional mask) for exercise 1, with the size of every named axis."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    mask: torch.Tensor | None
    sizes: dict[str, int]
    batch_axes: tuple[str, ...] = field(default_factory=tuple)

    def axes(self, *last: str) -> tuple[str, ...]:
        return (*self.batch_axes, *last)

    def cast(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.q.to(dtype), self.k.to(dtype), self.v.to(dtype)

    def rounded(self, dtype: torch.dtype) -> "AttentionCase":
        """The same case with q, k, v rounded to ``dtype`` (kept in float64): the reference then sees
        exactly the inputs the learner gets, which matters where large values amplify rounding."""
        q, k, v = (t.to(dtype).to(torch.float64) for t in (self.q, self.k, self.v))
        return AttentionCase(q, k, v, self.mask, self.sizes, self.batch_axes)


DEFAULT_SIZES = {"B": 2, "H": 3, "L_q": 5, "L_k": 7, "d_k": 8, "d_v": 6}


def attention_case(seed: int, *, batch_axes=("B", "H"), mask: str | None = None, scale: float = 1.0,
                   bound: float | None = None, **sizes: int) -> AttentionCase:
    """Inputs for exercise 1. ``mask``: None, "full" (one mask per batch item and head),
    "broadcast" (one (L_q, L_k) mask for all), "heads" ((B, 1, L_q, L_k): one per batch item,
    shared by its heads), "per-head" ((H, L_q, L_k): one per head, shared by the batch) or
    "padding" ((B, 1, 1, L_k): a key-padding mask, the same keys hidden from every query). ``bound``: clamp q,
    k, v to [-bound, bound] (before ``scale``), so that no seed draws a tail value whose rounding in
    a low precision dominates (the dtype tests: DTYPE_BOUND).

    Example (exercise 1's suite)::

        case = inputs.attention_case(seed, mask="broadcast")           # case.mask: (L_q, L_k)
        q, k, v = case.cast(torch.float32)                             # case.q, .k, .v stay float64
        axes = case.axes("L_q", "d_v")                                 # ("B", "H", "L_q", "d_v")
        one_query = inputs.attention_case(seed, batch_axes=("B",), L_q=1, L_k=9)    # (B, L, d), no H"""
    s = {**DEFAULT_SIZES, **sizes}
    gen = generator(seed)
    batch = [s[a] for a in batch_axes]
    q = _bounded(randn(gen, *batch, s["L_q"], s["d_k"]), bound) * scale
    k = _bounded(randn(gen, *batch, s["L_k"], s["d_k"]), bound) * scale
    v = _bounded(randn(gen, *batch, s["L_k"], s["d_v"]), bound)
    m = None
    if mask == "full":
        m = random_mask(gen, *batch, s["L_q"], s["L_k"])
    elif mask == "broadcast":
        m = random_mask(gen, s["L_q"], s["L_k"])
    elif mask == "heads":
        m = random_mask(gen, *batch[:1], *([1] * (len(batch) - 1)), s["L_q"], s["L_k"])
    elif mask == "per-head":
        m = random_mask(gen, *batch[1:], s["L_q"], s["L_k"])                    # (H, L_q, L_k)
    elif mask == "padding":
        m = random_mask(gen, *batch[:1], *([1] * len(batch[1:])), 1, s["L_k"])  # (B, 1, 1, L_k)
    used = {a: s[a] for a in (*batch_axes, "L_q", "L_k", "d_k", "d_v")}
    return AttentionCase(q, k, v, m, used, tuple(batch_axes))


# Scores of masked_scores_case: every one in [-24 - 2.47, -24 + 2.47] (d_k = 8).
SCORE_OFFSET = 24.0


def masked_scores_case(seed: int, *, offset: float = SCORE_OFFSET, **sizes: int) -> AttentionCase:
    """Inputs (B, H, L_q, L_k, with a full random mask) on which "masked keys get exactly zero
    weight" has one answer for a given fill value, whatever the seed.

    Every scaled score q.k / sqrt(d_k) lies in [-offset - r, -offset + r], r = (d_k - 1) / sqrt(d_k)
    (2.47 for d_k = 8): axis 0 of every query is +c and of every key -c, c = sqrt(offset sqrt(d_k)),
    which adds exactly -offset to every score, and the other axes are uniform in [-1, 1], which
    adds at most r either way. A masked key's weight is exp(fill - max allowed score) / (row sum in
    [1, L_k]): with fill -inf (or finfo.min, -1e4, -1e9) exactly 0; with a "small enough" fill such
    as -100 at least exp(-100 + 21.5) / 7 = 1e-35, a normal float32 (> 1.2e-38) at every seed. With
    unit-variance scores instead, whether exp(-100 - max) underflowed to 0 depended on the seed.
    """
    s = {**DEFAULT_SIZES, **sizes}
    gen = generator(seed)
    batch = [s["B"], s["H"]]
    c = (offset * s["d_k"] ** 0.5) ** 0.5
    q = torch.rand(*batch, s["L_q"], s["d_k"], generator=gen, dtype=torch.float64) * 2 - 1   # (B, H, L_q, d_k)
    k = torch.rand(*batch, s["L_k"], s["d_k"], generator=gen, dtype=torch.float64) * 2 - 1   # (B, H, L_k, d_k)
    q[..., 0], k[..., 0] = c, -c
    v = randn(gen, *batch, s["L_k"], s["d_v"])                                                # (B, H, L_k, d_v)
    mask = random_mask(gen, *batch, s["L_q"], s["L_k"])                                       # (B, H, L_q, L_k)
    used = {a: s[a] for a in ("B", "H", "L_q", "L_k", "d_k", "d_v")}
    return AttentionCase(q, k, v, mask, used, ("B", "H"))


def aligned_key(query: torch.Tensor, score: float) -> torch.Tensor:
    """A key (..., d_k) whose scaled score against ``query`` (..., d_k) is exactly ``score``:
    query * score * sqrt(d_k) / |query|^2."""
    d_k = query.shape[-1]
    return query * (score * d_k**0.5 / (query * query).sum(-1, keepdim=True))   # (..., d_k)


def large_scores_case(seed: int, *, scale: float, top: float = 120.0, **sizes: int) -> AttentionCase:
    """attention_case(seed, mask="full", scale=scale), with one allowed key in every row planted
    so that its scaled score is exactly ``top`` (in float64; within ~1e-5 of it once rounded).

    Every row's largest allowed score is then at least ``top`` = 120, above 88.7, where exp()
    overflows in float32: a softmax without the max subtraction turns every row into NaN at every
    seed, and a fill such as -100 leaves a masked key a weight below exp(-220), invisible (that
    mistake is the masked-weights test's). The planted key of query i is the allowed key
    random_mask forces for it, (i + n) % L_k for batch-head n, a different key for every query
    (L_q <= L_k); its scores against the other queries stay as random as the rest.
    """
    case = attention_case(seed, mask="full", scale=scale, **sizes)
    L_q, L_k, d_k = case.sizes["L_q"], case.sizes["L_k"], case.sizes["d_k"]
    assert L_q <= L_k, "one planted key per query needs L_q <= L_k"
    q = case.q.reshape(-1, L_q, d_k)                          # (B*H, L_q, d_k)
    k = case.k.clone().reshape(-1, L_k, d_k)                  # (B*H, L_k, d_k)
    for n in range(q.shape[0]):
        for i in range(L_q):
            k[n, (i + n) % L_k] = aligned_key(q[n, i], top)   # (d_k,): q_i . k / sqrt(d_k) = top
    assert case.mask is not None                              # mask="full" draws one
    mask = case.mask.clone()
    _plant_near_tie(q, k, mask.reshape(-1, L_q, L_k), top, heads=mask.shape[-3] if mask.dim() >= 3 else 1)
    return AttentionCase(case.q, k.reshape(case.k.shape), case.v, mask, case.sizes, case.batch_axes)


HIDDEN_ABOVE = 120.0      # large_scores_case: how far row 0's hidden key scores above its allowed ones


def _plant_near_tie(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor, top: float, *, heads: int) -> None:
    """In row 0 of batch-head 0, two allowed keys 2 apart and at least 20 above every other allowed
    score: its weights are then 0.88 and 0.12 (not one-hot), so a wrong scale moves them by ~0.1,
    a hundred times LARGE_TOL, at every seed. And a hidden key HIDDEN_ABOVE (120) above them, where
    float32 underflows every allowed weight beside it (exp(-104) < 2^-149): a mask that is ignored
    (added as numbers, added as -100, or applied after the softmax, renormalised or not) fails at
    every seed, while a fill of -100 or below still hides it. Keys L_k - 2 and L_k - 1 are planted
    for no query (L_q <= L_k - 2). ``mask``: (N, L_q, L_k), its first ``heads`` slices the heads of
    batch item 0."""
    L_k = k.shape[1]
    assert q.shape[1] <= L_k - 2, "the near tie and the hidden key need two keys no query is planted on"
    second, hidden = L_k - 1, L_k - 2
    mask[0, 0, second] = True                                   # a second allowed key
    mask[0, 0, hidden] = False
    # random_mask's rules: some query sees every key, and some head sees it in every row; the entry
    # opened for that is never the one random_mask keeps hidden in its row (_forced_hidden)
    if not bool(mask[0, 1:, hidden].any()):
        mask[0, next(i for i in range(1, q.shape[1]) if _forced_hidden(0, i, L_k) != hidden), hidden] = True
    if heads > 1 and not bool(mask[1:heads, 0, hidden].any()):
        mask[next(h for h in range(1, heads) if _forced_hidden(h, 0, L_k) != hidden), 0, hidden] = True
    others = [j for j in range(1, L_k - 1) if bool(mask[0, 0, j])]
    scores = (k[0, others] @ q[0, 0]) / q.shape[-1] ** 0.5      # (len(others),)
    best = max([top - 20.0, *(float(x) for x in scores)]) + 20.0
    k[0, 0] = aligned_key(q[0, 0], best)                        # (d_k,)
    k[0, second] = aligned_key(q[0, 0], best - 2.0)
    k[0, hidden] = aligned_key(q[0, 0], best + HIDDEN_ABOVE)


@dataclass
class DecodeCase:
    """One decode step for exercise 2: the new token, the caches and the four projections."""

    x_t: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    w_q: torch.Tensor
    w_k: torch.Tensor
    w_v: torch.Tensor
    w_o: torch.Tensor
    n_heads: int
    sizes: dict[str, int]

    def tensors(self) -> list[torch.Tensor]:
        return [self.x_t, self.k_cache, self.v_cache, self.w_q, self.w_k, self.w_v, self.w_o]

    def args(self, dtype: torch.dtype) -> list:
        return [t.to(dtype) for t in self.tensors()] + [self.n_heads]

    def rounded(self, dtype: torch.dtype) -> "DecodeCase":
        """The same case with every tensor rounded to ``dtype`` (kept in float64): the reference then
        sees exactly the inputs the learner gets."""
        x_t, k_cache, v_cache, w_q, w_k, w_v, w_o = (t.to(dtype).to(torch.float64) for t in self.tensors())
        return DecodeCase(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, self.n_heads, self.sizes)


# Distinct sizes, T + 1 included: B=3, H=6, H_kv=2, T=7 (T+1=8), d_head=5, d_model=11.
DECODE_SIZES = {"B": 3, "n_heads": 6, "n_kv_heads": 2, "T": 7, "d_head": 5, "d_model": 11}


def projections(gen: torch.Generator, d_model: int, n_heads: int, n_kv_heads: int,
                d_head: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """w_q, w_k, w_v, w_o scaled so that scores have unit variance (unsaturated softmax)."""
    w_q = randn(gen, d_model, n_heads * d_head) / d_model**0.5
    w_k = randn(gen, d_model, n_kv_heads * d_head) / d_model**0.5
    w_v = randn(gen, d_model, n_kv_heads * d_head) / d_model**0.5
    w_o = randn(gen, n_heads * d_head, d_model) / (n_heads * d_head) ** 0.5
    return w_q, w_k, w_v, w_o


def decode_case(seed: int, *, bound: float | None = None, **sizes: int) -> DecodeCase:
    """Inputs for exercise 2; ``bound`` clamps x_t and the caches to [-bound, bound] (DTYPE_BOUND)."""
    s = {**DECODE_SIZES, **sizes}
    gen = generator(seed)
    B, H, Hkv, T, d, D = s["B"], s["n_heads"], s["n_kv_heads"], s["T"], s["d_head"], s["d_model"]
    x_t = _bounded(randn(gen, B, D), bound)                       # (B, d_model)
    k_cache = _bounded(randn(gen, B, Hkv, T, d), bound)           # (B, H_kv, T, d_head)
    v_cache = _bounded(randn(gen, B, Hkv, T, d), bound)           # (B, H_kv, T, d_head)
    return DecodeCase(x_t, k_cache, v_cache, *projections(gen, D, H, Hkv, d), H, dict(s))


def sequence(seed: int, L: int, **sizes: int):
    """A whole sequence x (B, L, d_model) and projections, for decode-vs-full-attention checks."""
    s = {**DECODE_SIZES, **sizes}
    gen = generator(seed)
    x = randn(gen, s["B"], L, s["d_model"])
    return x, projections(gen, s["d_model"], s["n_heads"], s["n_kv_heads"], s["d_head"]), s


@dataclass
class PrefillCase:
    """A prompt for exercise 3: the tokens and the four projections."""

    x: torch.Tensor
    w_q: torch.Tensor
    w_k: torch.Tensor
    w_v: torch.Tensor
    w_o: torch.Tensor
    n_heads: int
    sizes: dict[str, int]

    def tensors(self) -> list[torch.Tensor]:
        return [self.x, self.w_q, self.w_k, self.w_v, self.w_o]

    def args(self, dtype: torch.dtype) -> list:
        return [t.to(dtype) for t in self.tensors()] + [self.n_heads]

    def rounded(self, dtype: torch.dtype) -> "PrefillCase":
        """The same case with every tensor rounded to ``dtype`` (kept in float64)."""
        x, w_q, w_k, w_v, w_o = (t.to(dtype).to(torch.float64) for t in self.tensors())
        return PrefillCase(x, w_q, w_k, w_v, w_o, self.n_heads, self.sizes)

    def with_x(self, x: torch.Tensor) -> "PrefillCase":
        """The same weights on other tokens (sizes["L"] follows x)."""
        return PrefillCase(x, self.w_q, self.w_k, self.w_v, self.w_o, self.n_heads, {**self.sizes, "L": x.shape[1]})


# Distinct sizes: B=3, H=6, H_kv=2, L=7, d_head=5, d_model=11 (H*d_head=30, H_kv*d_head=10).
PREFILL_SIZES = {"B": 3, "n_heads": 6, "n_kv_heads": 2, "L": 7, "d_head": 5, "d_model": 11}


def prefill_case(seed: int, *, bound: float | None = None, **sizes: int) -> PrefillCase:
    """Inputs for exercise 3; ``bound`` clamps x to [-bound, bound] (DTYPE_BOUND)."""
    s = {**PREFILL_SIZES, **sizes}
    gen = generator(seed)
    x = _bounded(randn(gen, s["B"], s["L"], s["d_model"]), bound)         # (B, L, d_model)
    return PrefillCase(x, *projections(gen, s["d_model"], s["n_heads"], s["n_kv_heads"], s["d_head"]),
                       s["n_heads"], dict(s))

"""Seeded hidden inputs, generated on the CPU in float64 and cast for the device under test.

Every axis gets a distinct size (so a swapped axis can be named), values are unit-variance randn
(so a missing 1/sqrt(d_k) is visible: saturated inputs would hide it), and random masks keep at
least one allowed and one forbidden key in every row (a row with no allowed key is outside the
exercise contract). The same seed gives bitwise-identical inputs on every machine and device.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))


def randn(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def random_mask(gen: torch.Generator, *shape: int, p: float = 0.6) -> torch.Tensor:
    """Bool (..., L_q, L_k), at random, with one allowed and one hidden key forced in every row.

    The forced keys move with the row and with the leading (batch, head) index: every row of the
    mask and of its inverse keeps a True, and no key is hidden from every query or from every head
    at once. A key hidden all down a column (or across all heads) would turn a softmax over the
    queries (or the heads) into NaN for every output row alike, and those two mistakes could then
    not be told apart.
    """
    mask = torch.rand(*shape, generator=gen, dtype=torch.float64) < p
    L_q, L_k = shape[-2], shape[-1]
    flat = mask.reshape(-1, L_q, L_k)
    hide_at = 1 + (L_k - 1) // 2           # never 0 mod L_k (L_k >= 2): the two forced keys differ
    for n in range(flat.shape[0]):
        for i in range(L_q):
            flat[n, i, (i + n) % L_k] = True
            flat[n, i, (i + n + hide_at) % L_k] = False
    return flat.reshape(shape)


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
                   **sizes: int) -> AttentionCase:
    """Inputs for exercise 1. ``mask``: None, "full" (one mask per batch item and head),
    "broadcast" (one (L_q, L_k) mask for all) or "heads" ((B, 1, L_q, L_k))."""
    s = {**DEFAULT_SIZES, **sizes}
    gen = generator(seed)
    batch = [s[a] for a in batch_axes]
    q = randn(gen, *batch, s["L_q"], s["d_k"]) * scale
    k = randn(gen, *batch, s["L_k"], s["d_k"]) * scale
    v = randn(gen, *batch, s["L_k"], s["d_v"])
    m = None
    if mask == "full":
        m = random_mask(gen, *batch, s["L_q"], s["L_k"])
    elif mask == "broadcast":
        m = random_mask(gen, s["L_q"], s["L_k"])
    elif mask == "heads":
        m = random_mask(gen, *batch[:1], *([1] * (len(batch) - 1)), s["L_q"], s["L_k"])
    used = {a: s[a] for a in (*batch_axes, "L_q", "L_k", "d_k", "d_v")}
    return AttentionCase(q, k, v, m, used, tuple(batch_axes))


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


# Distinct sizes, T + 1 included: B=3, H=6, H_kv=2, T=7 (T+1=8), d_head=5, d_model=11.
DECODE_SIZES = {"B": 3, "n_heads": 6, "n_kv_heads": 2, "T": 7, "d_head": 5, "d_model": 11}


def projections(gen: torch.Generator, d_model: int, n_heads: int, n_kv_heads: int, d_head: int):
    """w_q, w_k, w_v, w_o scaled so that scores have unit variance (unsaturated softmax)."""
    w_q = randn(gen, d_model, n_heads * d_head) / d_model**0.5
    w_k = randn(gen, d_model, n_kv_heads * d_head) / d_model**0.5
    w_v = randn(gen, d_model, n_kv_heads * d_head) / d_model**0.5
    w_o = randn(gen, n_heads * d_head, d_model) / (n_heads * d_head) ** 0.5
    return w_q, w_k, w_v, w_o


def decode_case(seed: int, **sizes: int) -> DecodeCase:
    s = {**DECODE_SIZES, **sizes}
    gen = generator(seed)
    B, H, Hkv, T, d, D = s["B"], s["n_heads"], s["n_kv_heads"], s["T"], s["d_head"], s["d_model"]
    x_t = randn(gen, B, D)
    k_cache = randn(gen, B, Hkv, T, d)
    v_cache = randn(gen, B, Hkv, T, d)
    return DecodeCase(x_t, k_cache, v_cache, *projections(gen, D, H, Hkv, d), H, dict(s))


def sequence(seed: int, L: int, **sizes: int):
    """A whole sequence x (B, L, d_model) and projections, for decode-vs-full-attention checks."""
    s = {**DECODE_SIZES, **sizes}
    gen = generator(seed)
    x = randn(gen, s["B"], L, s["d_model"])
    return x, projections(gen, s["d_model"], s["n_heads"], s["n_kv_heads"], s["d_head"]), s

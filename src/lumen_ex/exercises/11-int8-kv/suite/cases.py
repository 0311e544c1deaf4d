"""Hidden inputs for exercise 11 (quantize_kv, int8_decode_step).

Every value that gets quantized (the rows given to quantize_kv, the new keys and values, and the
query, which a known mistake quantizes too) is built row by row so that its codes are certain: a
row of width d gets an absmax A (drawn in a range), one element exactly +-A (code +-127), and every
other element (n + f) * A / 127 with n an integer in [-126, 126] and |f| <= 0.45. So x / scale sits
at least 0.05 from a half-integer before rounding to the dtype under test, and at least 1e-3 after
rounding to float32 (asserted: float32 moves x / scale by ~1e-5): every correct order of operations
(x / scale, x * (127 / amax), x * 127 / amax, float32 inside) gives the reference's codes, at every
seed. float16 and bfloat16 round x / scale itself (bfloat16 to a multiple of 0.5 near 127), so their
codes may differ by one (the suite allows it there, as the contract does).

The old cache is what quantize_kv makes of such rows, as a real cache is. Only values are seeded;
sizes, the zero rows and their places are fixed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lumen_ex.author import inputs

# Every axis a distinct size: B=3, H=4, H_kv=2, T=7 (T+1=8), d=12 (MQA: H_kv=1).
SIZES = {"B": 3, "H": 4, "H_kv": 2, "T": 7, "d": 12}
# The ranges of each row's absmax: keys and values, and the query. Scores q.k / sqrt(d) then have a
# standard deviation near 1 (no saturated softmax: a missing scale or a wrong head stays visible).
KV_AMAX = (1.5, 3.0)
Q_AMAX = (1.0, 2.0)
# The dtype tests: smaller values, so that float16 and bfloat16 attention stays well inside its
# tolerance (scores of order 1).
KV_AMAX_LOW = (0.75, 1.5)
MARGIN = 1e-3            # the contract: every x / scale this far from a half-integer (float32, float64)

# Rows of zeros in the zero-row test, as (b, h, t) of an x (B, H_kv, T, d).
ZERO_ROWS = ((0, 1, 2), (1, 0, 0), (2, 1, 6), (2, 0, 3))


def safe_rows(gen: torch.Generator, *shape: int, amax: tuple[float, float]) -> torch.Tensor:
    """float64 (..., d): every row has its absmax in ``amax`` and every x / scale at least 0.05 from a
    half-integer."""
    *lead, d = shape
    lo, hi = amax
    A = lo + (hi - lo) * torch.rand(*lead, 1, generator=gen, dtype=torch.float64)          # (..., 1)
    n = torch.randint(-126, 127, tuple(shape), generator=gen).to(torch.float64)           # (..., d)
    f = (torch.rand(*shape, generator=gen, dtype=torch.float64) * 2 - 1) * 0.45           # (..., d)
    r = n + f                                                                             # (..., d)
    at = torch.randint(0, d, (*lead, 1), generator=gen)                                    # (..., 1)
    sign = torch.where(torch.rand(*lead, 1, generator=gen) < 0.5, -1.0, 1.0).to(torch.float64)
    r = r.scatter(-1, at, 127.0 * sign)                                                   # the absmax element
    return r * A / 127                                                                    # (..., d)


def margin(x: torch.Tensor) -> float:
    """The smallest distance of x / (amax / 127) from a half-integer, over the rows that are not zero."""
    x = x.to(torch.float64)
    amax = x.abs().amax(dim=-1, keepdim=True)
    r = x / torch.where(amax == 0, torch.ones_like(amax), amax / 127)
    dist = ((r - r.floor()) - 0.5).abs()
    return float(dist[(amax != 0).expand_as(x)].min()) if bool((amax != 0).any()) else 1.0


def checked(x: torch.Tensor) -> torch.Tensor:
    """``x``, after asserting the contract's margin for float32 and float64 inputs."""
    assert margin(x) >= MARGIN and margin(x.to(torch.float32)) >= MARGIN, "inputs too close to a half-integer"
    return x


def quant_input(seed: int, *, zero_rows=(), amax=KV_AMAX, **sizes: int) -> torch.Tensor:
    """x (B, H_kv, T, d) for quantize_kv, float64, with the rows ``zero_rows`` all zeros. The first row's
    absmax element is negative at every seed (a code clamped to -128 instead of -127 shows there)."""
    s = {**SIZES, **sizes}
    x = safe_rows(inputs.generator(seed), s["B"], s["H_kv"], s["T"], s["d"], amax=amax)
    first = x[0, 0, 0]                                                                    # (d,)
    if float(first[first.abs().argmax()]) > 0:
        x[0, 0, 0] = -first          # negated, its codes keep their distance from every half-integer
    for b, h, t in zero_rows:
        x[b, h, t] = 0.0
    return checked(x)


def quantize64(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference's codes and scales in float64 (codes as float64 integers)."""
    x = x.to(torch.float64)
    amax = x.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax == 0, torch.ones_like(amax), amax / 127)
    return torch.round(x / scale).clamp(-127, 127), scale


@dataclass
class DecodeCase:
    """One int8 decode step, float64 (the codes as float64 integers)."""

    q_t: torch.Tensor          # (B, H, d)
    k_q: torch.Tensor          # (B, H_kv, T, d) codes
    k_scale: torch.Tensor      # (B, H_kv, T, 1)
    v_q: torch.Tensor
    v_scale: torch.Tensor
    k_t: torch.Tensor          # (B, H_kv, d)
    v_t: torch.Tensor
    sizes: dict[str, int]

    def args(self, dtype: torch.dtype) -> list[torch.Tensor]:
        """The arguments as the learner gets them: codes int8, the rest in ``dtype``."""
        return [self.q_t.to(dtype), self.k_q.to(torch.int8), self.k_scale.to(dtype), self.v_q.to(torch.int8),
                self.v_scale.to(dtype), self.k_t.to(dtype), self.v_t.to(dtype)]

    def rounded(self, dtype: torch.dtype) -> "DecodeCase":
        """The same case with every float rounded to ``dtype`` (kept in float64): the reference then
        sees exactly what the learner gets."""
        r = lambda t: t.to(dtype).to(torch.float64)      # noqa: E731
        return DecodeCase(r(self.q_t), self.k_q, r(self.k_scale), self.v_q, r(self.v_scale), r(self.k_t),
                          r(self.v_t), self.sizes)

    def expected_caches(self) -> tuple[torch.Tensor, ...]:
        """The grown caches in float64: (k_q, k_scale, v_q, v_scale), the new entries quantized."""
        kq, ks = quantize64(self.k_t)
        vq, vs = quantize64(self.v_t)
        grow = lambda old, new: torch.cat([old, new[:, :, None, :]], dim=2)   # noqa: E731
        return grow(self.k_q, kq), grow(self.k_scale, ks), grow(self.v_q, vq), grow(self.v_scale, vs)


def decode_case(seed: int, *, kv_amax=KV_AMAX, **sizes: int) -> DecodeCase:
    """A decode step with T tokens cached (quantized from rows like the new ones)."""
    s = {**SIZES, **sizes}
    gen = inputs.generator(seed)
    B, H, Hkv, T, d = s["B"], s["H"], s["H_kv"], s["T"], s["d"]
    q_t = checked(safe_rows(gen, B, H, d, amax=Q_AMAX))                       # (B, H, d)
    k_q, k_scale = quantize64(safe_rows(gen, B, Hkv, T, d, amax=kv_amax))     # (B, H_kv, T, d), (B, H_kv, T, 1)
    v_q, v_scale = quantize64(safe_rows(gen, B, Hkv, T, d, amax=kv_amax))
    k_t = checked(safe_rows(gen, B, Hkv, d, amax=kv_amax))                     # (B, H_kv, d)
    v_t = checked(safe_rows(gen, B, Hkv, d, amax=kv_amax))
    return DecodeCase(q_t, k_q, k_scale, v_q, v_scale, k_t, v_t, s)


def sequence(seed: int, L: int, **sizes: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict]:
    """L tokens to decode from an empty cache: queries (L, B, H, d), keys and values (L, B, H_kv, d)."""
    s = {**SIZES, **sizes}
    gen = inputs.generator(seed)
    q = checked(safe_rows(gen, L, s["B"], s["H"], s["d"], amax=Q_AMAX))
    k = checked(safe_rows(gen, L, s["B"], s["H_kv"], s["d"], amax=KV_AMAX))
    v = checked(safe_rows(gen, L, s["B"], s["H_kv"], s["d"], amax=KV_AMAX))
    return q, k, v, s

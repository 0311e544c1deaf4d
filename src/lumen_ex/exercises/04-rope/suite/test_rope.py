"""Hidden suite for exercise 4: rope, the rotary position embedding (RoFormer's adjacent pairs).

Every test builds seeded float64 inputs on the CPU, computes the reference from them, sends the
inputs (x cast to the dtype under test, positions as integers) to the learner's code through
``submission``, and checks what came back shape first. The docstring's first line is what the
learner sees as the test's name.

Axis names in feedback: B batch, H heads, L tokens, d the width (even), d/2 the pairs; "qk" stacks a
query and a key tensor in the relative-position test.

The inputs are built so that no verdict depends on the seed (docs/tolerances.md, "RoPE"):

- every pair (x[..., 2i], x[..., 2i+1]) has a norm in [0.5, 1] and a random direction, so a pair
  turned by a wrong angle a is off by 2 sin(a/2) times at least 0.5, never hidden by a tiny pair;
- every value test allows, on top of the dtype's tolerance, ANGLE_SLACK * P * R, where P is the
  largest |position| and R the largest pair norm of the test's input: angles computed in float32
  (as llama and transformers do) carry a rounding error of about |angle| * 2^-24, which turns each
  pair by that much (measured: at most 1.1 * P * R * 2^-24, 15 times below the slack);
- the dtype tests put most tokens at positions 2049 + 16k (k < 128), which float16 and bfloat16
  both round by exactly 1: angles computed in those dtypes turn the first pair, whose frequency is
  exactly 1, a whole radian too far or too short at every seed, and that pair names the mistake.
"""

from __future__ import annotations

import math
import re
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import pytest
import torch

from lumen_ex.author import CheckFailed, Expected, Tolerance, exercise, expect, fail, inputs, pictures

ref = exercise(__file__).reference
_mistakes = exercise(__file__).mistakes
DEFAULT_BASE, angles, rope_variants, rotate_pairs = (_mistakes.DEFAULT_BASE, _mistakes.angles, _mistakes.rope_variants,
                                                     _mistakes.rotate_pairs)

FN = "rope"
# Every axis a distinct size, 2 included (a (..., d/2, 2) output then reads as such); d/2 = 6 too.
SIZES = {"qk": 2, "B": 4, "H": 3, "L": 7, "d": 12}
REALISTIC = {"B": 3, "H": 4, "L": 40, "d": 64}
PAIR_NORMS = (0.5, 1.0)
# The float32-angle allowance: 16 times the float32 rounding of the largest angle P (the first pair's
# frequency is 1), times the largest pair norm R (docs/tolerances.md).
ANGLE_SLACK = 2.0 ** -20
BASES = [500.0, 1_000_000.0]
SHIFT = 41                        # the relative-position test moves every position by this much
LOW_PRECISION = (torch.float16, torch.bfloat16)


# -------------------------------------------------------------------------------------------------
# Inputs


@dataclass
class RopeCase:
    """x (..., L, d) in float64, positions (L,) int64, the base (None: not passed, the default)."""

    x: torch.Tensor
    positions: torch.Tensor
    sizes: dict[str, int]
    batch_axes: tuple[str, ...] = field(default_factory=tuple)
    base: float | None = None

    @property
    def base_value(self) -> float:
        return DEFAULT_BASE if self.base is None else float(self.base)

    def axes(self) -> tuple[str, ...]:
        return (*self.batch_axes, "L", "d")

    def kwargs(self) -> dict:
        return {} if self.base is None else {"base": self.base}

    def rounded(self, dtype: torch.dtype) -> "RopeCase":
        """x rounded to ``dtype`` (kept in float64): the reference then sees exactly the learner's input."""
        return replace(self, x=self.x.to(dtype).to(torch.float64))

    def expected(self) -> torch.Tensor:
        return ref.rope(self.x, self.positions, self.base_value)

    def variants(self):
        return lambda: rope_variants(self.x, self.positions, self.base_value)


def pair_norms(x: torch.Tensor) -> torch.Tensor:
    """|(x[..., 2i], x[..., 2i+1])|: (..., L, d/2)."""
    return x.to(torch.float64).unflatten(-1, (-1, 2)).norm(dim=-1)


def _pairs(gen: torch.Generator, lead: list[int], L: int, d: int, lo: float, hi: float) -> torch.Tensor:
    """(*lead, L, d): every adjacent pair of norm uniform in [lo, hi], at a uniform random angle."""
    r = lo + (hi - lo) * torch.rand(*lead, L, d // 2, generator=gen, dtype=torch.float64)     # (..., L, d/2)
    a = 2 * math.pi * torch.rand(*lead, L, d // 2, generator=gen, dtype=torch.float64)        # (..., L, d/2)
    return torch.stack([r * a.cos(), r * a.sin()], dim=-1).flatten(-2)                         # (..., L, d)


def make_positions(gen: torch.Generator, kind: str, L: int) -> torch.Tensor:
    """(L,) int64 positions. "arange": 0 .. L-1, a prompt; "zeros": all 0; "offset": distinct,
    unsorted, with gaps, from somewhere in 20 .. 199; "large": distinct, unsorted, in the thousands
    (1000 .. 8999); "low-precision": three of 0 .. 3 and the rest 2049 + 16k (k < 128), which
    float16 and bfloat16 both round by exactly 1 (module docstring)."""
    if kind == "arange":
        return torch.arange(L)
    if kind == "zeros":
        return torch.zeros(L, dtype=torch.int64)
    if kind == "offset":
        p = int(torch.randint(20, 200, (1,), generator=gen)) + torch.randperm(4 * L, generator=gen)[:L]
    elif kind == "large":
        p = 1000 + torch.randperm(8000, generator=gen)[:L]
    elif kind == "low-precision":
        small = torch.randperm(4, generator=gen)[:3]
        big = 2049 + 16 * torch.randperm(128, generator=gen)[: L - 3]
        p = torch.cat([small, big])[torch.randperm(L, generator=gen)]
    else:
        raise ValueError(kind)
    if L > 1 and bool((p[1:] > p[:-1]).all()):     # "unsorted" whatever the seed drew
        p = p.flip(0)
    return p


def rope_case(seed: int, *, batch_axes=("B", "H"), positions: str | torch.Tensor = "arange",
              base: float | None = None, randn: bool = False, **sizes: int) -> RopeCase:
    """Inputs for exercise 4: x of pairs with norms in PAIR_NORMS (plain randn when ``randn``)."""
    s = {**SIZES, **sizes}
    gen = inputs.generator(seed)
    lead = [s[a] for a in batch_axes]
    L, d = s["L"], s["d"]
    x = inputs.randn(gen, *lead, L, d) if randn else _pairs(gen, lead, L, d, *PAIR_NORMS)
    p = positions if isinstance(positions, torch.Tensor) else make_positions(gen, positions, L)
    used = {**{a: s[a] for a in batch_axes}, "L": L, "d": d, "d/2": d // 2}
    return RopeCase(x, p, used, tuple(batch_axes), base)


def tolerance(case: RopeCase, dtype: torch.dtype) -> Tolerance:
    """The dtype's tolerance plus ANGLE_SLACK * P * R (module docstring, docs/tolerances.md)."""
    base = expect.TOLERANCES[dtype]
    P = float(case.positions.abs().max())
    R = float(pair_norms(case.x).max())
    return Tolerance(base.atol + ANGLE_SLACK * P * R, base.rtol)


# -------------------------------------------------------------------------------------------------
# Calling the learner's rope, and naming what went wrong


def _fixed_rank(exc) -> bool:
    """Sizes unpacked from x.shape for one number of axes, or more indices than x has axes."""
    if re.search(r"too many indices for tensor of dimension", exc.message):
        return True
    line = expect.failing_line(exc)
    return bool(re.search(r"(not enough|too many) values to unpack", exc.message)) and bool(
        re.search(r"\.shape|\.size\(", line))


def _table_too_short(exc) -> bool:
    return bool(re.search(r"index -?\d+ is out of bounds for dimension \d+ with size \d+", exc.message))


def _complex_bfloat16(exc) -> bool:
    return "view_as_complex is only supported" in exc.message and "BFloat16" in exc.message


def _complex_strides(exc) -> bool:
    return bool(re.search(r"Tensor must have a last dimension with stride 1|stride divisible by 2", exc.message))


def named_exceptions(case: RopeCase):
    """Exceptions whose cause is recognisable: (misconception, sentence, predicate)."""
    L, half = case.x.shape[-2], case.x.shape[-1] // 2

    def table_shape(exc) -> bool:
        m = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)", exc.message)
        return m is not None and L != half and {int(m.group(1)), int(m.group(2))} == {L, half}

    return [
        ("complex-bfloat16", "torch has no complex bfloat16, so torch.view_as_complex refuses a bfloat16 x: do the "
         "complex product in float32, torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2).contiguous()), "
         "and cast the result back with .type_as(x)", _complex_bfloat16),
        ("complex-view-strides", "torch.view_as_complex needs each pair side by side in memory (last stride 1), and x "
         "may be a non-contiguous view (a slice or a transpose of a bigger tensor): call .contiguous() on the "
         "(..., d/2, 2) tensor first (x.float() copies only when the dtype changes)", _complex_strides),
        ("table-too-short", "your cos/sin table ends before the largest position: positions can be in the thousands "
         "(a long prompt, a deep KV cache). Compute the angles from the positions you are given, "
         "positions[:, None] * inv_freq[None, :], rather than indexing a table of fixed length", _table_too_short),
        ("fixed-rank", "your code assumes a fixed number of axes, but x is (..., L, d): any leading axes, or none (a "
         "plain (L, d) matrix). Read the sizes from the end, L, d = x.shape[-2:], and index with x[..., 0::2]",
         _fixed_rank),
        ("angle-table-shape", f"the angle table must be (L, d/2) = ({L}, {half}), one row per token and one column per "
         "pair: positions[:, None] * inv_freq[None, :] (or torch.outer(positions, inv_freq)); positions (L,) "
         "times inv_freq (d/2,) does not broadcast into it", table_shape),
    ]


def call(submission, case: RopeCase, *, dtype=torch.float32, device="cpu", positions_dtype=torch.int64, **options):
    """Call the learner's rope on ``case``: the CallResult and the returned tensor."""
    x = case.x.to(dtype)
    with expect.exceptions_named(named_exceptions(case)):
        result = submission.call(FN, (x, case.positions.to(positions_dtype)), case.kwargs(), device=device, **options)
    return result, expect.is_tensor(result.value, "output")


@contextmanager
def shape_hints(case: RopeCase):
    """Name the mistake a wrong shape points to: the pairs left as (..., d/2, 2) or (..., 2, d/2)."""
    try:
        yield
    except CheckFailed as exc:
        diag = exc.diagnosis
        lead, half = list(case.x.shape[:-1]), case.x.shape[-1] // 2
        if diag.kind == "shape" and list(diag.got or []) in (lead + [half, 2], lead + [2, half]):
            diag.misconception = "pairs-not-flattened"
            diag.hint = ("your output still holds the pairs on an axis of their own: flatten them back into the last "
                         "axis, torch.stack([first, second], dim=-1).flatten(-2), so that it is (..., L, d) like x")
        raise


def check(submission, case: RopeCase, *, dtype=torch.float32, device="cpu", tol: Tolerance | None = None,
          **options):
    """The learner's rope(x, positions[, base]) must match the float64 reference on ``case``."""
    expected = case.expected()                    # from the inputs, before the call
    tol = tol or tolerance(case, dtype)
    result, out = call(submission, case, dtype=dtype, device=device, **options)
    try:
        with shape_hints(case):
            expect.tensors([Expected(out, expected, "output", case.axes(), case.variants(), tol)],
                           sizes=case.sizes, dtype=dtype, device=device)
    except CheckFailed as exc:
        diag = exc.diagnosis
        if diag.kind == "values" and diag.misconception is None and dtype in LOW_PRECISION:
            _name_low_precision_angles(diag, out, case, dtype, tol)
        if diag.kind in ("values", "nonfinite"):
            picture(diag, out, expected, case, tol)
        raise
    return result, out


def _name_low_precision_angles(diag, out, case: RopeCase, dtype, tol: Tolerance) -> None:
    """The first pair (frequency exactly 1, so its angle is the position itself) turned by the
    positions rounded to ``dtype``, and not by the positions: the angles were computed in ``dtype``."""
    p = case.positions.to(torch.float64)
    p_low = p.to(dtype).to(torch.float64)
    moved = (p_low != p).nonzero().flatten()
    if not len(moved):
        return
    got = out.detach().to(torch.float64)[..., :2]                          # (..., L, 2)
    rounded = rotate_pairs(case.x[..., :2], p_low[:, None])                # (..., L, 2)
    exact = rotate_pairs(case.x[..., :2], p[:, None])                      # (..., L, 2)
    if not (expect.separation(got, rounded, tol) <= 1.0 < expect.separation(got, exact, tol)):
        return
    j = int(moved[0])
    name = str(dtype).removeprefix("torch.")
    fix = (f"your angles positions * frequency were computed in {name}, which holds about "
           f"{3 if dtype == torch.float16 else 2} significant digits. Compute them in float32 (or float64), "
           "positions.float()[:, None] * inv_freq.float(), and cast only cos and sin to x's dtype")
    diag.misconception = "angles-in-low-precision"
    diag.hint = (f"your first pair (x[..., 0], x[..., 1]), whose frequency is exactly 1, is turned by the positions "
                 f"rounded to {name} (position {int(p[j])} became {int(p_low[j])}, a whole radian off) on this "
                 f"test's input: {fix}")
    diag.details.update({
        "misconception_sentence": "your first pair, whose frequency is exactly 1, is turned by the positions rounded "
                                  f"to x's dtype (2049 becomes 2048 in float16 and bfloat16): {fix}",
        "variant_max_error": float((got - rounded).abs().max()), "variant_tolerance": tol.atol,
        "position": int(p[j]), "rounded_to": int(p_low[j])})


def picture(diag, out, expected: torch.Tensor, case: RopeCase, tol: Tolerance) -> None:
    """Attach the rotation angle of every (token, pair), expected against yours, both in [0, 2 pi)
    (yours: the angle from the input pair to your output pair), marking the pairs whose values
    differ: a wrong frequency shows as columns, wrong positions as rows."""
    got = out.detach().to(torch.float64)
    if tuple(got.shape) != tuple(case.x.shape):
        return
    x = case.x.to(out.dtype).to(torch.float64)       # as the learner got it: an unturned pair is exactly 0
    theta = angles(case.positions, x.shape[-1], case.base_value).expand(*x.shape[:-1], -1)   # (..., L, d/2)
    x0, x1, g0, g1 = x[..., 0::2], x[..., 1::2], got[..., 0::2], got[..., 1::2]              # (..., L, d/2)
    turned = torch.atan2(x0 * g1 - x1 * g0, x0 * g0 + x1 * g1)                              # (..., L, d/2)
    shown = theta.remainder(2 * math.pi)                                                     # (..., L, d/2)
    yours = turned.remainder(2 * math.pi)                                                    # (..., L, d/2)
    yours = torch.where(yours > 2 * math.pi - 1e-6, 0.0, yours)          # -1e-12 is no turn, not 6.28
    bad = ((got - expected).abs() > tol.atol + tol.rtol * expected.abs()) | ~torch.isfinite(got)
    wrong = bad.unflatten(-1, (-1, 2)).any(-1)                                               # (..., L, d/2)
    yours = torch.where(wrong, yours, shown)     # a pair within tolerance shows the expected angle exactly
    pictures.attach(diag, yours, shown, what="rotation angle mod 2 pi",
                    axes=(*case.batch_axes, "L", "d/2"), wrong=wrong, rows="tokens", cols="pairs", kind="angles")


# -------------------------------------------------------------------------------------------------
# The contract


def _is_default_base(text) -> bool:
    try:
        return float(text) == DEFAULT_BASE
    except (TypeError, ValueError):
        return False


@pytest.mark.group("contract")
def test_signature(submission):
    """rope has the stub's parameters"""
    expect.signature(submission, FN, ["x", "positions", "base"])
    params = {p.get("name"): p for p in (submission.signature(FN).get("params") or []) if isinstance(p, dict)}
    default = params.get("base", {}).get("default")
    if not _is_default_base(default):
        raise fail("signature", f"rope's base defaults to {default}; it should default to 10000.0",
                   expected="base=10000.0", got=f"base={default}",
                   hint="Keep the stub's signature: def rope(x, positions, base=10000.0).")


@pytest.mark.group("contract")
def test_returns_a_tensor(submission, seed, device):
    """returns one tensor"""
    call(submission, rope_case(seed), device=device)


# -------------------------------------------------------------------------------------------------
# Shapes, with any number of leading axes


@pytest.mark.group("shapes")
@pytest.mark.parametrize("batch_axes", [("B", "H"), ("B",), ()], ids=["4d", "3d", "2d"])
def test_shapes(submission, seed, device, batch_axes):
    """output has x's shape (..., L, d)"""
    case = rope_case(seed, batch_axes=batch_axes)
    _, out = call(submission, case, device=device)
    with shape_hints(case):
        expect.shape(out, case.x.shape, what="output", axes=case.axes(), sizes=case.sizes)


# -------------------------------------------------------------------------------------------------
# Values


@pytest.mark.group("values")
@pytest.mark.parametrize("batch_axes", [("B", "H"), ()], ids=["4d", "2d"])
def test_values(submission, seed, device, batch_axes):
    """values match the reference (positions 0 .. L-1)"""
    check(submission, rope_case(seed, batch_axes=batch_axes), device=device)


@pytest.mark.group("values")
def test_values_realistic_size(submission, seed, device):
    """realistic sizes (d = 64, L = 40, randn x)"""
    check(submission, rope_case(seed, randn=True, **REALISTIC), device=device)


@pytest.mark.group("values")
@pytest.mark.parametrize("base", BASES, ids=["500", "1e6"])
def test_base(submission, seed, device, base):
    """the base argument is honoured"""
    check(submission, rope_case(seed, base=base), device=device)


# -------------------------------------------------------------------------------------------------
# Positions


@pytest.mark.group("positions")
def test_decode_single_token(submission, seed, device):
    """one new token at position T (the cache length)"""
    T = int(torch.randint(20, 200, (1,), generator=inputs.generator(seed + 1)))
    check(submission, rope_case(seed, L=1, positions=torch.tensor([T])), device=device)


@pytest.mark.group("positions")
def test_offset_positions(submission, seed, device):
    """unsorted positions that start anywhere, with gaps"""
    check(submission, rope_case(seed, positions="offset"), device=device)


@pytest.mark.group("positions")
def test_positions_int32(submission, seed, device):
    """int32 positions"""
    check(submission, rope_case(seed, positions="offset"), device=device, positions_dtype=torch.int32)


@pytest.mark.group("positions")
def test_large_positions(submission, seed, device):
    """positions in the thousands"""
    check(submission, rope_case(seed, positions="large"), device=device)


# -------------------------------------------------------------------------------------------------
# Dtypes and devices


@pytest.mark.group("dtypes")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16], ids=["float64", "float16", "bfloat16"])
def test_dtype(submission, seed, device, dtype):
    """keeps x's dtype (positions up to about 4000)"""
    # x rounded to the dtype for the reference: what is left is the learner's arithmetic. Most
    # positions are 2049 + 16k, which float16 and bfloat16 round by exactly 1 (make_positions).
    check(submission, rope_case(seed, positions="low-precision").rounded(dtype), dtype=dtype, device=device)


@pytest.mark.group("dtypes")
def test_runs_on_meta(submission, seed):
    """works on x's device (checked on meta)"""
    # x and positions on meta: a tensor made without device=x.device (torch.arange(d // 2) for the
    # frequencies) then meets them in one operation and torch raises (named "new-tensor-device"), as it
    # would on a GPU. Meta tensors have no values: shape, dtype and device are checked here.
    case = rope_case(seed, positions="offset")
    _, out = call(submission, case, device="meta")
    with shape_hints(case):
        expect.tensors([Expected(out, case.expected(), "output", case.axes())], sizes=case.sizes,
                       dtype=torch.float32, device="meta")


# -------------------------------------------------------------------------------------------------
# Properties


@pytest.mark.group("properties")
def test_position_zero_is_identity(submission, seed, device):
    """position 0 leaves x unchanged"""
    check(submission, rope_case(seed, positions="zeros"), device=device)


@pytest.mark.group("properties")
def test_pair_norms_kept(submission, seed, device):
    """each pair keeps its length"""
    case = rope_case(seed, positions="offset")
    _, out = call(submission, case, device=device)
    with shape_hints(case):
        expect.shape(out, case.x.shape, what="output", axes=case.axes(), sizes=case.sizes)
    want = pair_norms(case.x.to(torch.float32))                                 # (B, H, L, d/2)
    got = pair_norms(out)                                                       # (B, H, L, d/2)
    off = (got - want).abs()
    if not bool((off <= 1e-5 + 1e-5 * want).all()):   # written so that NaN fails too
        worst = torch.nan_to_num(off, nan=math.inf)
        idx = [int(i) for i in (worst == worst.max()).nonzero()[0]]
        where = ", ".join(f"{a}={i}" for a, i in zip((*case.batch_axes, "L"), idx[:-1]))
        raise fail("property", f"pair {idx[-1]} of [{where}] has length {float(want[tuple(idx)]):.4g} in x but "
                   f"{float(got[tuple(idx)]):.4g} in your output: a rotation keeps the length of every pair "
                   "(x[..., 2i], x[..., 2i+1])", details={"index": idx},
                   hint="Each output pair is its input pair turned by one angle: out[2i] = x[2i] cos - x[2i+1] sin "
                        "and out[2i+1] = x[2i] sin + x[2i+1] cos, with the same angle on both lines.")


@pytest.mark.group("properties")
def test_relative_positions(submission, seed, device):
    """rope(q, m) . rope(k, n) depends only on m - n"""
    # q and k stacked on a leading axis (a 5-D x), at positions p and at p + SHIFT: every score
    # q_m . k_n must stay the same, as it depends only on the distance m - n.
    case = rope_case(seed, batch_axes=("qk", "B", "H"), positions="offset")
    shifted = replace(case, positions=case.positions + SHIFT)
    scores = []
    for c in (case, shifted):
        _, out = call(submission, c, device=device)
        with shape_hints(c):
            expect.shape(out, c.x.shape, what="output", axes=c.axes(), sizes=c.sizes)
        out = out.to(torch.float64)
        scores.append(out[0] @ out[1].transpose(-2, -1))                        # (B, H, L, L)
    R, d = float(pair_norms(case.x).max()), case.x.shape[-1]
    atol = 1e-4 + d * R * R * ANGLE_SLACK * float(shifted.positions.max())      # float32 angles (docs/tolerances.md)
    change = (scores[1] - scores[0]).abs()
    if not bool((change <= atol + 1e-4 * scores[0].abs()).all()):   # NaN fails too
        worst = torch.nan_to_num(change, nan=math.inf)
        b, h, m, n = (int(i) for i in (worst == worst.max()).nonzero()[0])
        pm, pn = int(case.positions[m]), int(case.positions[n])
        raise fail("property", f"the score rope(q, {pm}) . rope(k, {pn}) [B={b}, H={h}] changed by "
                   f"{float(change[b, h, m, n]):.3g} when both positions moved by {SHIFT} (to {pm + SHIFT} and "
                   f"{pn + SHIFT}): it must depend only on the distance m - n = {pm - pn}",
                   details={"index": [b, h, m, n], "shift": SHIFT},
                   hint="Turn each pair of q and of k by position * frequency, nothing else: the two rotations then "
                        "cancel into one by (m - n) * frequency in every dot product.")


@pytest.mark.group("properties")
def test_inputs_unchanged(submission, seed, device):
    """x and positions are not modified in place"""
    case = rope_case(seed, positions="offset")
    x = case.x.to(torch.float32)
    result = submission.call(FN, (x, case.positions), echo_args=True, device=device)
    for name, before, after in zip(("x", "positions"), (x, case.positions), result.args_after or ()):
        if (not isinstance(after, torch.Tensor) or after.shape != before.shape
                or after.dtype != before.dtype or not torch.equal(after, before)):
            raise fail("side-effect", f"your function modified its input {name} in place",
                       hint="Build a new tensor for the output (torch.stack, torch.cat, torch.empty_like(x) filled "
                            "in): writing into x[..., 0::2] changes the caller's tensor.",
                       misconception="inputs-modified")


@pytest.mark.group("properties")
def test_noncontiguous_inputs(submission, seed, device):
    """non-contiguous x (a slice or a transpose of a bigger tensor)"""
    check(submission, rope_case(seed, positions="offset"), device=device, noncontiguous=True)


@pytest.mark.group("properties")
def test_gradients_flow(submission, seed, device):
    """gradients reach x"""
    # Positions 0 .. L-1: float32 angles then stay ~100x inside GRADIENT_TOLERANCE (docs/tolerances.md).
    case = rope_case(seed)
    expected = case.expected()
    g = inputs.randn(inputs.generator(seed + 7), *expected.shape)
    result, out = call(submission, case, dtype=torch.float64, device=device, grad_wrt=(0,), grad_seeds=(g,))
    # Forward values first (float64: a mistake is named to 1e-9): wrong values explain wrong gradients.
    expect.tensors([Expected(out, expected, "output", case.axes(), case.variants(), tolerance(case, torch.float64))],
                   sizes=case.sizes, dtype=torch.float64, device=device)
    x = case.x.clone().requires_grad_()
    want = torch.autograd.grad((ref.rope(x, case.positions, case.base_value) * g).sum(), (x,))
    expect.gradients(result, want, names=("x",))


# -------------------------------------------------------------------------------------------------
# CUDA (worth no points: not every machine has a GPU)


@pytest.mark.group("cuda")
def test_cuda(submission, seed, cuda):
    """runs on the GPU"""
    check(submission, rope_case(seed, positions="large"), device=cuda)

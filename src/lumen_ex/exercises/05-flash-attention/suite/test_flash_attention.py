"""Hidden suite for exercise 5: flash_attention, exact attention block by block with an online softmax.

Every test builds seeded float64 inputs on the CPU, computes the reference from them before the
call, sends the inputs (cast to the dtype under test) to the learner's code through ``submission``,
and checks what came back shape first, then dtype and device, then values, then the mistake. The
docstring's first line is what the learner sees as the test's name.

Axis names in feedback: B batch, H heads, L_q queries, L_k keys, d_k the query/key width, d_v the
value width. The default sizes (L_q = 20, L_k = 37, block_size = 8) leave a shorter last block on
both axes, and with causal=True the first query sits at key position 17, past two whole key blocks.

Two properties are the point of the exercise and have tests of their own: memory that grows
linearly with L, measured by the harness from outside the worker (src/lumen_ex/harness/memory.py),
and causal work that skips the key blocks entirely in the future, counted by the worker's op
counter (a hint, backed only by the source scan: src/lumen_ex/sandbox/inside/work_counter.py).
"""

from __future__ import annotations

import math
import re
from contextlib import contextmanager

import pytest
import torch

from lumen_ex.author import (
    CheckFailed,
    Expected,
    LinearMemory,
    Tolerance,
    exercise,
    expect,
    fail,
    inputs,
    meta,
)

ref = exercise(__file__).reference
variants = exercise(__file__).mistakes

FN = "flash_attention"
OUTPUTS = ("output", "lse")
BLOCK = 8                           # divides neither L_q = 20 nor L_k = 37
SIZES = {"B": 2, "H": 3, "L_q": 20, "L_k": 37, "d_k": 8, "d_v": 6}
# For the dtype tests (float16 and bfloat16 are matched at 1e-2 and 2e-2): 1/sqrt(d_k) = 1/4 and
# 1/sqrt(d_v) = 1/2 a factor 2 apart, as in exercise 1.
DTYPE_SIZES = {"d_k": 16, "d_v": 4}
# Scores of the extreme-score tests: every one within 2.47 of +120 (exp overflows float32 above
# 88.7) or of -150 (exp(-147.5) underflows to exactly 0 in float32). float32 rounds a score of that
# size to about 1e-5, so these tests compare at 1e-3.
HIGH_SCORE, LOW_SCORE = 120.0, -150.0
EXTREME_TOL = Tolerance(1e-3, 1e-3)

# Memory: two calls at L = 4096 (non-causal and causal), block_size 256, measured by the harness;
# the budget at length L is half of one (L, L) float32 matrix (32 MiB at L = 4096).
# Linear code holds a few block_size x block_size tiles (a few MiB; all query rows against one key
# block, 4 MiB at L = 4096). The proof is made at L = 4096 first; a call over the budget there is
# measured again at L = 8192 (four times the work), where what every measurement carries besides the
# call (torch's code pages, the allocator's arenas: up to ~16 MiB through /proc) weighs a quarter as
# much against the budget, and that verdict stands (a failure's details give the growth from 4096).
# A linear file pays the short proof only.
# (block_size 256 rather than 128: a quarter of the learner's loop iterations, the same proof.)
MEMORY_L, CONFIRM_L = 4096, 8192
MEMORY_BLOCK = 256
MEMORY_SIZES = {"B": 1, "H": 1, "d_k": 16, "d_v": 8}
SAMPLED_ROWS = 48     # the query rows whose values a long call is checked on (drawn from the seed)
# The work counter's view at a smaller length: no intermediate may hold a quarter of an L x L matrix
# (block_size 128: all query rows against one key block stay an eighth of it, and so does one block
# of scores made by broadcast-multiply-sum, block_size^2 x d_k at d_k = 8). 36 block pairs: the
# counter's cost is per op, a few tens of microseconds each.
COUNTED_L, COUNTED_BLOCK = 1024, 128
COUNTED_SIZES = {"B": 1, "H": 1, "d_k": 8, "d_v": 8}
SHORT_L = 256         # the values at this length are checked first (a wrong file fails fast)
# Cost: L = 512 in 8 blocks of 64; causal visits 36 of the 64 key blocks (56%), a little more with
# the masking of the diagonal blocks. Computing every block and masking the future costs more
# than the non-causal call.
COST_L, COST_BLOCK, MAX_CAUSAL_SHARE = 512, 64, 0.85
COST_SIZES = {"B": 1, "H": 1, "d_k": 8, "d_v": 6}


# -------------------------------------------------------------------------------------------------
# Inputs, the learner's call and the staged checks


def case_for(seed: int, *, batch_axes=("B", "H"), bound=None, **sizes) -> inputs.AttentionCase:
    return inputs.attention_case(seed, batch_axes=batch_axes, bound=bound, **{**SIZES, **sizes})


def shifted_scores_case(seed: int, offset: float, **sizes) -> inputs.AttentionCase:
    """q, k, v whose every scaled score lies within (d_k - 1) / sqrt(d_k) of ``offset``: axis 0 is
    c for every query and +-c for every key, c = sqrt(|offset| sqrt(d_k)); the others are uniform in
    [-1, 1]. The answer of an exp that overflows (or underflows) does not depend on the seed."""
    s = {**SIZES, **sizes}
    gen = inputs.generator(seed)
    c = (abs(offset) * s["d_k"] ** 0.5) ** 0.5
    q = torch.rand(s["B"], s["H"], s["L_q"], s["d_k"], generator=gen, dtype=torch.float64) * 2 - 1   # (B, H, L_q, d_k)
    k = torch.rand(s["B"], s["H"], s["L_k"], s["d_k"], generator=gen, dtype=torch.float64) * 2 - 1   # (B, H, L_k, d_k)
    q[..., 0], k[..., 0] = c, math.copysign(c, offset)
    v = inputs.randn(gen, s["B"], s["H"], s["L_k"], s["d_v"])                                        # (B, H, L_k, d_v)
    return inputs.AttentionCase(q, k, v, None, dict(s), ("B", "H")).rounded(torch.float32)


def lse_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype lse must have: q's, or float32 for float16 and bfloat16 inputs (FlashAttention's)."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _block_mismatch(block_size: int):
    """A size mismatch between block_size and a shorter last block: code that assumes every block
    is block_size long (a mask or a buffer made once for a whole block)."""

    def holds(exc) -> bool:
        found = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)", exc.message)
        return bool(found) and block_size in {int(found.group(1)), int(found.group(2))}

    return holds


def named_exceptions(block_size: int):
    return [("partial-block-dropped", "your code assumes every block is block_size long, but when L is not a "
             "multiple of block_size the last block is shorter: cut each block at min(start + block_size, L) and "
             "make masks and buffers for the block's real size", _block_mismatch(block_size))]


def flash(submission, case, *, causal=False, block_size=BLOCK, dtype=torch.float32, device="cpu", **options):
    """Call the learner's flash_attention on ``case``: the CallResult and its (output, lse).
    causal and block_size are passed only when they differ from the defaults the stub declares."""
    kwargs = {}
    if causal:
        kwargs["causal"] = True
    if block_size is not None:
        kwargs["block_size"] = block_size
    with expect.exceptions_named(named_exceptions(block_size or 64)):
        result = submission.call(FN, case.cast(dtype), kwargs, device=device, **options)
    return result, expect.returns(result.value, OUTPUTS, FN)


def truth(case, causal: bool):
    """The float64 (output, lse), computed the plain way (the small inputs of most tests)."""
    return ref.attention_with_lse(case.q, case.k, case.v, causal)


def axis_sizes(case) -> dict[str, int]:
    return dict(case.sizes)


@contextmanager
def shape_hints(case, block_size: int):
    """Name the mistake a wrong shape points to: a trailing size-1 lse axis, or the rows of a last
    partial query block left out."""
    try:
        yield
    except CheckFailed as exc:
        diag = exc.diagnosis
        got = list(diag.got or []) if isinstance(diag.got, list) else []
        what = diag.summary.split(":")[0]
        L_q = case.sizes["L_q"]
        if diag.kind == "shape" and diag.misconception != "outputs-swapped":
            if what == "lse" and len(got) == len(case.batch_axes) + 2 and got[-2:] == [L_q, 1]:
                diag.misconception = "lse-keepdim"
                diag.hint = "lse has one value per query, (..., L_q): drop the trailing axis (keepdim=False, or .squeeze(-1))."
            elif got and L_q % block_size and len(got) > len(case.batch_axes) \
                    and got[len(case.batch_axes)] == (L_q // block_size) * block_size:
                diag.misconception = "partial-block-dropped"
                diag.hint = (f"{what} has {got[len(case.batch_axes)]} query rows, L_q // block_size whole blocks: "
                             f"the last block of {L_q % block_size} queries is missing. Loop with "
                             "range(0, L_q, block_size) and cut each block at min(start + block_size, L_q).")
        raise


def check_flash(submission, case, *, causal=False, block_size=BLOCK, dtype=torch.float32, device="cpu",
                tol: Tolerance | None = None, check=OUTPUTS, named=True, **options):
    """The learner's (output, lse) on ``case`` against the float64 reference, stage by stage: both
    shapes, then both dtypes (lse: float32 for half inputs), then devices, then the values named in
    ``check``, each against the known mistakes (``named``). Returns the CallResult."""
    exp_out, exp_lse = truth(case, causal)                                    # from the inputs, before the call
    result, (out, lse) = flash(submission, case, causal=causal, block_size=block_size, dtype=dtype,
                               device=device, **options)
    bs = block_size or 64

    both: list = []   # the known mistakes' (output, lse) lists, computed once for the two tensors

    def known(which):
        def listed():
            if not both:
                both.extend(variants.flash_variants(case.q, case.k, case.v, causal, bs))
            return both[which]
        return listed if named else None

    tol = tol or expect.TOLERANCES[dtype]
    items = [Expected(expect.is_tensor(out, "output"), exp_out, "output", case.axes("L_q", "d_v"), known(0), tol),
             Expected(expect.is_tensor(lse, "lse"), exp_lse, "lse", case.axes("L_q"), known(1), tol)]
    with shape_hints(case, bs):
        expect.shapes(items, sizes=axis_sizes(case))
    want = (dtype, lse_dtype(dtype))
    if items[0].got.dtype != dtype:
        expect.tensors([items[0]], sizes=axis_sizes(case), dtype=dtype, device=device)   # raises the dtype failure
    _check_lse_dtype(items[1].got, dtype)
    for it, dt in zip(items, want):            # devices (meta: what the worker says of each tensor)
        if meta(it.got).device.split(":")[0] != device.split(":")[0]:
            expect.tensors([it], sizes=axis_sizes(case), dtype=dt, device=device)   # raises the device failure
    for it, dt in zip(items, want):            # then values
        if it.what in check:
            expect.tensors([it], sizes=axis_sizes(case), dtype=dt, device=device)
    return result


def _check_lse_dtype(lse: torch.Tensor, dtype: torch.dtype) -> None:
    want = lse_dtype(dtype)
    if lse.dtype == want:
        return
    name = lambda d: str(d).removeprefix("torch.")   # noqa: E731
    if want != dtype:
        raise fail("dtype", f"lse has dtype {name(lse.dtype)}; for {name(dtype)} inputs it must be float32",
                   expected="float32", got=name(lse.dtype), misconception="lse-not-float32",
                   hint="Keep the running maximum and sum in float32 for float16 and bfloat16 inputs (as "
                        "FlashAttention does) and return lse in float32: only the output goes back to q's dtype.")
    raise fail("dtype", f"lse has dtype {name(lse.dtype)}; the inputs were {name(dtype)}", expected=name(dtype),
               got=name(lse.dtype), misconception=expect.dtype_misconception(lse.dtype, dtype),
               hint="For float32 and float64 inputs lse has q's dtype: make the running maximum and sum with "
                    "dtype=q.dtype.")


# -------------------------------------------------------------------------------------------------
# The contract


@pytest.mark.group("contract")
def test_signature(submission):
    """flash_attention has the stub's parameters and defaults"""
    expect.signature(submission, FN, ["q", "k", "v", "causal", "block_size"],
                     defaults={"causal": "False", "block_size": "64"})


@pytest.mark.group("contract")
def test_returns_output_and_lse(submission, seed, device):
    """returns a pair (output, lse)"""
    flash(submission, case_for(seed), device=device)


# -------------------------------------------------------------------------------------------------
# Shapes, batched and unbatched


@pytest.mark.group("shapes")
@pytest.mark.parametrize("batch_axes", [("B", "H"), ("B",), ()], ids=["4d", "3d", "2d"])
def test_shapes(submission, seed, device, batch_axes):
    """output (..., L_q, d_v), lse (..., L_q)"""
    case = case_for(seed, batch_axes=batch_axes)
    exp_out, exp_lse = truth(case, False)
    _, (out, lse) = flash(submission, case, device=device)
    with shape_hints(case, BLOCK):
        expect.shapes([Expected(expect.is_tensor(out, "output"), exp_out, "output", case.axes("L_q", "d_v")),
                       Expected(expect.is_tensor(lse, "lse"), exp_lse, "lse", case.axes("L_q"))],
                      sizes=axis_sizes(case))


# -------------------------------------------------------------------------------------------------
# Values of the output (non-causal)


@pytest.mark.group("values")
@pytest.mark.parametrize("batch_axes", [("B", "H"), ()], ids=["4d", "2d"])
def test_values(submission, seed, device, batch_axes):
    """output matches the reference (block_size 8, partial last blocks)"""
    check_flash(submission, case_for(seed, batch_axes=batch_axes), device=device, check=("output",))


@pytest.mark.group("values")
def test_values_default_block_size(submission, seed, device):
    """the default block_size (64), lengths past one block"""
    case = case_for(seed, L_q=70, L_k=150)
    check_flash(submission, case, block_size=None, device=device, check=("output",))


@pytest.mark.group("values")
def test_values_single_query(submission, seed, device):
    """a single query (L_q = 1)"""
    check_flash(submission, case_for(seed, L_q=1), device=device, check=("output",))


@pytest.mark.group("values")
def test_values_one_block(submission, seed, device):
    """block_size larger than both lengths (one block)"""
    check_flash(submission, case_for(seed), block_size=64, device=device, check=("output",))


@pytest.mark.group("values")
def test_large_scores(submission, seed, device):
    """large scores (about +120) do not overflow"""
    case = shifted_scores_case(seed, HIGH_SCORE)
    try:
        check_flash(submission, case, device=device, tol=EXTREME_TOL, named=False, check=("output",))
    except CheckFailed as exc:
        if exc.diagnosis.kind == "nonfinite":
            exc.diagnosis.misconception = "softmax-overflow"
            exc.diagnosis.hint = ("Every score here is about 120 and exp(120) overflows float32 (above 88.7): "
                                  "exponentiate s - m_new, the scores minus the running maximum, never s itself.")
        raise


@pytest.mark.group("values")
def test_very_negative_scores(submission, seed, device):
    """very negative scores (about -150) do not underflow"""
    case = shifted_scores_case(seed, LOW_SCORE)
    try:
        check_flash(submission, case, device=device, tol=EXTREME_TOL, named=False, check=("output",))
    except CheckFailed as exc:
        diag = exc.diagnosis
        if diag.kind == "nonfinite" or (diag.kind == "values" and not diag.misconception):
            diag.misconception = "running-max-init-zero"
            diag.hint = ("Every score here is about -150, and exp(-150) is exactly 0 in float32: a running maximum "
                         "that starts at 0 (torch.zeros) stays 0, so the running sum is 0 and 0 / 0 is NaN. Start it "
                         "at -inf (torch.full(..., float('-inf'))), so the first block sets it to that block's maximum.")
        raise


@pytest.mark.group("values")
def test_noncontiguous_inputs(submission, seed, device):
    """non-contiguous inputs (reshape, not view)"""
    check_flash(submission, case_for(seed), device=device, noncontiguous=True, check=("output",))


# -------------------------------------------------------------------------------------------------
# lse, the log-sum-exp of each query's scaled scores


@pytest.mark.group("lse")
@pytest.mark.parametrize("batch_axes", [("B", "H"), ()], ids=["4d", "2d"])
def test_lse(submission, seed, device, batch_axes):
    """lse = log(sum(exp(q k / sqrt(d_k)))) for each query"""
    check_flash(submission, case_for(seed, batch_axes=batch_axes), device=device, check=("lse",))


@pytest.mark.group("lse")
def test_lse_large_scores(submission, seed, device):
    """lse of large scores (about +120)"""
    check_flash(submission, shifted_scores_case(seed, HIGH_SCORE), device=device, tol=EXTREME_TOL,
                check=("lse",), named=False)


# -------------------------------------------------------------------------------------------------
# Causal, aligned bottom-right (query i at key position L_k - L_q + i)


CAUSAL_CASES = [({}, BLOCK), ({"L_q": 29, "L_k": 29}, BLOCK), ({"L_q": 1}, BLOCK), ({}, 64)]


@pytest.mark.group("causal")
@pytest.mark.parametrize("sizes,block_size", CAUSAL_CASES, ids=["rectangular", "square", "single-query", "one-block"])
def test_causal(submission, seed, device, sizes, block_size):
    """causal=True: output and lse, mask aligned bottom-right"""
    check_flash(submission, case_for(seed, **sizes), causal=True, block_size=block_size, device=device)


# -------------------------------------------------------------------------------------------------
# Any block size gives the same, exact result


BLOCK_CASES = [(1, True), (3, False), (5, True), (7, False), (16, True), (20, True), (37, False), (100, True)]


@pytest.mark.group("blocks")
@pytest.mark.parametrize("block_size,causal", BLOCK_CASES,
                         ids=[f"{b}{'-causal' if c else ''}" for b, c in BLOCK_CASES])
def test_block_sizes(submission, seed, device, block_size, causal):
    """exact for any block_size (lengths not multiples of it)"""
    # block_size 1 on 7 queries and 13 keys: every block is one query or one key already, and at the
    # usual 20 x 37 the learner's block loop would run 740 times per head (the slowest test of a check).
    case = case_for(seed, L_q=7, L_k=13) if block_size == 1 else case_for(seed)
    check_flash(submission, case, causal=causal, block_size=block_size, device=device)


@pytest.mark.group("blocks")
def test_lengths_multiple_of_block(submission, seed, device):
    """lengths that are whole blocks (16 and 32, block_size 8)"""
    check_flash(submission, case_for(seed, L_q=16, L_k=32), causal=True, device=device)


# -------------------------------------------------------------------------------------------------
# Dtypes


@pytest.mark.group("dtypes")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16], ids=["float64", "float16", "bfloat16"])
def test_dtype(submission, seed, device, dtype):
    """lse float32 for float16/bfloat16 inputs (else q's dtype); output in q's dtype"""
    # Bounded inputs, and the reference computed from them as rounded to ``dtype`` (as exercise 1).
    case = case_for(seed, bound=inputs.DTYPE_BOUND, **DTYPE_SIZES).rounded(dtype)
    check_flash(submission, case, causal=True, dtype=dtype, device=device)


@pytest.mark.group("dtypes")
def test_runs_on_meta(submission, seed):
    """works on the inputs' device (checked on meta)"""
    # q, k, v on meta (shapes, dtypes and devices, no data): a tensor made without device=q.device
    # (a running maximum, a mask) meets them in one operation and torch raises ("new-tensor-device").
    check_flash(submission, case_for(seed), causal=True, device="meta")


# -------------------------------------------------------------------------------------------------
# Memory: linear in L, measured by the harness


def _long_case(seed: int, L: int) -> inputs.AttentionCase:
    return inputs.attention_case(seed, batch_axes=("B", "H"), L_q=L, L_k=L, **MEMORY_SIZES)


QUADRATIC_HINT = ("Never build the (L_q, L_k) scores, weights or mask: take one block of queries and one block of keys "
                  "at a time (scores (..., block_size, block_size)), keep per query a running maximum, a running sum and "
                  "an output accumulator, and rescale them when the maximum grows. Memory then grows like L, not L^2.")


PROOF = LinearMemory(counted_L=COUNTED_L, memory_L=MEMORY_L, confirm_L=CONFIRM_L, hint=QUADRATIC_HINT)


def check_rows(submission, case, rows: torch.Tensor, *, causal: bool, device: str, block_size=MEMORY_BLOCK,
               **options):
    """A long call: both shapes in full, then dtypes, devices and the values of the query ``rows``
    against the float64 reference of those rows alone (the whole reference would cost the grader
    seconds at L = 8192). The rows are drawn from the test's seed: code cannot know which they are."""
    L_q, L_k = case.sizes["L_q"], case.sizes["L_k"]
    q = case.q[..., rows, :]                                                   # (B, H, n, d_k)
    scores = q @ case.k.transpose(-2, -1) / math.sqrt(case.sizes["d_k"])       # (B, H, n, L_k)
    if causal:
        scores = scores.masked_fill(torch.arange(L_k)[None, :] > (rows + L_k - L_q)[:, None], float("-inf"))
    exp_out, exp_lse = torch.softmax(scores, dim=-1) @ case.v, torch.logsumexp(scores, dim=-1)
    result, (out, lse) = flash(submission, case, causal=causal, block_size=block_size, device=device, **options)
    sizes = axis_sizes(case)
    out, lse = expect.is_tensor(out, "output"), expect.is_tensor(lse, "lse")
    expect.shape(out, (*case.q.shape[:-1], case.sizes["d_v"]), what="output", axes=case.axes("L_q", "d_v"), sizes=sizes)
    expect.shape(lse, case.q.shape[:-1], what="lse", axes=case.axes("L_q"), sizes=sizes)

    def take(t, what):
        """t at the sampled query rows, keeping what the worker said about t (its device)."""
        part = t[..., rows, :] if what == "output" else t[..., rows]
        part.lumen_meta = meta(t)
        return part

    tol = Tolerance(1e-4, 1e-4)
    rows_axes = case.axes("rows", "d_v"), case.axes("rows")
    expect.tensors([Expected(take(out, "output"), exp_out, "output (sampled rows)", rows_axes[0], tol=tol)],
                   sizes=sizes, dtype=torch.float32, device=device)
    expect.tensors([Expected(take(lse, "lse"), exp_lse, "lse (sampled rows)", rows_axes[1], tol=tol)],
                   sizes=sizes, dtype=torch.float32, device=device)
    return result


@pytest.mark.group("memory")
def test_memory_linear_in_length(submission, seed):
    """memory grows linearly with L (measured by the grader)"""
    device = "cpu"
    # 0. The same checks as step 1 at a short length first: code whose values are wrong fails here in
    #    milliseconds, before a fresh worker and the long calls are paid for (they check values too).
    check_flash(submission, _long_case(seed, SHORT_L), causal=True, block_size=COUNTED_BLOCK, device=device,
                tol=Tolerance(1e-4, 1e-4), named=False)
    # In a fresh worker, on the CPU: the baseline is what torch alone holds, not what earlier tests
    # loaded (torch's meta kernels, a CUDA context); and the harness measures host memory.
    submission.fresh_worker()
    # 1. The work counter (the worker's: a hint that can only fail): no intermediate of O(L^2) elements,
    #    scores or mask, at a length where that is cheap to see (values on sampled rows, as below).
    case = inputs.attention_case(seed, batch_axes=("B", "H"), L_q=COUNTED_L, L_k=COUNTED_L, **COUNTED_SIZES)
    PROOF.check_counted(check_rows(submission, case, _sampled_rows(seed, COUNTED_L), causal=True, device=device,
                                   block_size=COUNTED_BLOCK, count_ops=True).ops)
    # 2. The proof, from the harness's side: the peak memory of the worker (every process it forks
    #    included) over each call, beyond what it held at start (src/lumen_ex/harness/memory.py).
    #    Over the budget at L = 4096, the same calls at 8192 decide (see MEMORY_L); a failure's
    #    details give the growth from 4096 (src/lumen_ex/graders/support/memory_proof.py).
    PROOF.prove(lambda L: _memory_readings(submission, seed, L, device))


def _memory_readings(submission, seed: int, L: int, device: str) -> dict:
    """The harness's MemoryUse of two calls at length ``L``: non-causal ("long") and causal, each
    checking its values on sampled rows (a fast wrong answer proves nothing)."""
    case, rows = _long_case(seed, L), _sampled_rows(seed, L)     # the calls do not change their inputs' copies

    def call(causal: bool):
        return lambda: check_rows(submission, case, rows, causal=causal, device=device, measure_memory=True)

    return PROOF.readings(L, {"long": call(False), "causal": call(True)})


def _sampled_rows(seed: int, L: int) -> torch.Tensor:
    """SAMPLED_ROWS query rows of L, drawn from the seed, sorted."""
    return torch.randperm(L, generator=inputs.generator(seed))[:SAMPLED_ROWS].sort().values


# -------------------------------------------------------------------------------------------------
# Cost: causal skips the blocks entirely in the future


@pytest.mark.group("cost")
def test_causal_skips_future_blocks(submission, seed, device):
    """causal=True does about half the work (future blocks skipped)"""
    # The work counter runs in the learner's process: a low count passes this test, and only the source
    # scan (which refuses code that could reach the counter) stands behind it (work_counter.py).
    case = inputs.attention_case(seed, batch_axes=("B", "H"), L_q=COST_L, L_k=COST_L, **COST_SIZES)
    counts = {}
    for causal in (False, True):
        result = check_flash(submission, case, causal=causal, block_size=COST_BLOCK, device=device,
                             tol=Tolerance(1e-4, 1e-4), named=False, count_ops=True)
        if not isinstance(result.ops, dict) or not isinstance(result.ops.get("total_elements"), int):
            raise fail("protocol", "the worker did not report how much work the call did")
        counts[causal] = int(result.ops["total_elements"])
    share = counts[True] / max(counts[False], 1)
    if share > MAX_CAUSAL_SHARE:
        n = COST_L // COST_BLOCK
        raise fail("property", f"with causal=True your code does {share:.0%} of the non-causal work at L = {COST_L} "
                   f"(block_size {COST_BLOCK}: {n * (n + 1) // 2} of {n * n} key blocks are needed, about half): it "
                   "computes the key blocks entirely in the future and masks them", expected=f"at most {MAX_CAUSAL_SHARE:.0%}",
                   got=round(share, 3), details={"total_elements": counts, "L": COST_L, "block_size": COST_BLOCK},
                   misconception="future-blocks-computed",
                   hint="For the query block [i0, i1) the last query sits at key position L_k - L_q + i1 - 1: stop the "
                        "key loop at min(L_k, L_k - L_q + i1) and mask only the blocks that cross the diagonal.")


# -------------------------------------------------------------------------------------------------
# CUDA (worth no points: not every machine has a GPU)


@pytest.mark.group("cuda")
def test_cuda(submission, seed, cuda):
    """runs on the GPU"""
    check_flash(submission, case_for(seed), causal=True, device=cuda)

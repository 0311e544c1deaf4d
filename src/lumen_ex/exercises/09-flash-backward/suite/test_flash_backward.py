"""Hidden suite for exercise 9: flash_attention_backward, FlashAttention's backward block by block.

Every test draws seeded float64 q, k, v and d_out on the CPU, computes the forward's out and lse
from them in float64 (exercise 5's forward; suite/cases.py) and the float64 truth of the gradients
before the call, sends the inputs cast to the dtype under test (lse in float32 for float16 and
bfloat16) to the learner's code through ``submission``, and checks what came back shape first,
then dtype and device, then values, then the mistake. The docstring's first line is what the
learner sees as the test's name.

Axis names in feedback: B batch, H heads, L_q queries, L_k keys, d_k the query/key width, d_v the
value width. The default sizes (L_q = 7, L_k = 17, block_size = 3) leave a shorter last block on
both axes; with causal=True the first query sits at key position 10. A wrong dv or dk comes with a
picture: the weights P (or the dS) that the learner's gradient was built from, solved for exactly
(d_v and d_k are at least L_q), beside the right ones.

Two properties are the point of the exercise and have tests of their own, as in exercise 5: memory
that grows linearly with L, measured by the harness from outside the worker, and causal work that
skips the blocks entirely in the future, counted by the worker's op counter (a hint that can only
fail a test, never pass one).
"""

from __future__ import annotations

import math
import re
from contextlib import contextmanager

import pytest
import torch

from lumen_ex.author import (
    TOLERANCES,
    CheckFailed,
    Expected,
    LinearMemory,
    Tolerance,
    exercise,
    expect,
    fail,
    meta,
    pictures,
    sibling,
)

ref = exercise(__file__).reference
variants = exercise(__file__).mistakes
cases = sibling(__file__, "suite/cases")

FN = "flash_attention_backward"
PARAMS = ("q", "k", "v", "out", "lse", "d_out", "causal", "block_size")
OUTPUTS = ("dq", "dk", "dv")
BLOCK = 3                           # divides neither L_q = 7 nor L_k = 17
# For the dtype tests (float16 and bfloat16 are matched at 1e-2 and 2e-2): d_k = 16 (1/sqrt(d_k) = 1/4)
DTYPE_SIZES = {"d_k": 16, "d_v": 9}

# Memory, as in exercise 5: two calls at L = 4096 (non-causal and causal), block_size 256, measured by
# the harness from outside the worker; the budget at length L is half of one (L, L) float32 matrix
# (32 MiB at L = 4096). A blockwise backward holds a few block_size x block_size tiles (s, P, dP, dS:
# 1 MiB each) and dq, dk, dv. A call over the budget at 4096 is measured again at 8192 (four times
# the work), where what every measurement carries besides the call (torch's code pages, the
# allocator's arenas: up to ~16 MiB through /proc) weighs a quarter as much, and that verdict stands.
MEMORY_L, CONFIRM_L = 4096, 8192
MEMORY_BLOCK = 256
MEMORY_SIZES = {"B": 1, "H": 1, "d_k": 8, "d_v": 4}
SAMPLED_ROWS = 32     # the query rows (for dq) and key rows (for dk, dv) a long call is checked on
# The work counter's view at a smaller length: no intermediate may hold a quarter of an L x L matrix
# (block_size 128: all query rows against one key block stay an eighth of it).
COUNTED_L, COUNTED_BLOCK = 1024, 128
# The values of a short causal call are checked first (a wrong file fails fast, before a fresh
# worker): L_q = 200 and L_k = 300 at block_size 128, both with a shorter last block, rectangular.
SHORT_SIZES = {"L_q": 200, "L_k": 300}
LONG_TOL = Tolerance(1e-4, 1e-4)
# Cost: L = 512 in 8 blocks of 64 on each axis, blocks aligned at 0; causal needs 36 of the 64 block
# pairs. The budget is the ideal count (the non-causal count times 36/64) plus half of the waste of
# not skipping (the rest of the non-causal count): 78% of the non-causal work.
COST_L, COST_BLOCK = 512, 64
COST_SIZES = {"B": 1, "H": 1, "d_k": 8, "d_v": 6}


# -------------------------------------------------------------------------------------------------
# Inputs, the learner's call and the staged checks


def case_for(seed: int, *, causal=False, **sizes) -> cases.BackwardCase:
    return cases.backward_case(seed, causal=causal, **sizes)


def axis_sizes(case) -> dict[str, int]:
    return dict(case.sizes)


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


def backward(submission, case, *, block_size=BLOCK, dtype=torch.float32, device="cpu", **options):
    """Call the learner's flash_attention_backward on ``case``: the CallResult and its (dq, dk, dv).
    causal and block_size are passed only when they differ from the defaults the stub declares."""
    kwargs = {}
    if case.causal:
        kwargs["causal"] = True
    if block_size is not None:
        kwargs["block_size"] = block_size
    with expect.exceptions_named(named_exceptions(block_size or 64)):
        result = submission.call(FN, case.args(dtype), kwargs, device=device, **options)
    return result, expect.returns(result.value, OUTPUTS, FN)


def truth(case) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The float64 (dq, dk, dv), computed the plain way (the small inputs of most tests)."""
    return ref.attention_backward(case.q, case.k, case.v, case.d_out, case.causal)


def expected_items(case, got, *, block_size: int, tol=None, named=True) -> list[Expected]:
    """An Expected for each of dq, dk, dv, against the truth, with the known mistakes (computed once,
    only when a value is wrong)."""
    exp = truth(case)
    listed: list = []

    def known(n):
        def compute():
            if not listed:
                listed.extend(variants.backward_variants(case.q, case.k, case.v, case.out, case.lse, case.d_out,
                                                         case.causal, block_size))
            return listed[n]
        return compute if named else None

    axes = (case.axes("L_q", "d_k"), case.axes("L_k", "d_k"), case.axes("L_k", "d_v"))
    return [Expected(expect.is_tensor(g, what), e, what, ax, known(n), tol)
            for n, (g, e, what, ax) in enumerate(zip(got, exp, OUTPUTS, axes))]


@contextmanager
def shape_hints(case, block_size: int):
    """Name the mistake a wrong shape points to: the rows of a last partial block left out."""
    try:
        yield
    except CheckFailed as exc:
        diag = exc.diagnosis
        got = list(diag.got or []) if isinstance(diag.got, list) else []
        what = diag.summary.split(":")[0]
        n = len(case.batch_axes)
        L = case.sizes["L_q" if what == "dq" else "L_k"]
        if diag.kind == "shape" and not diag.misconception and len(got) == n + 2 and L % block_size \
                and got[n] == (L // block_size) * block_size:
            diag.misconception = "partial-block-dropped"
            diag.hint = (f"{what} has {got[n]} rows, L // block_size whole blocks: the last block of {L % block_size} "
                         "is missing. Loop with range(0, L, block_size) and cut each block at min(start + block_size, L).")
        raise


def _wrong(it: Expected, tol: Tolerance) -> bool:
    g, e = it.got.detach().to(torch.float64), it.value
    return g.shape == e.shape and not bool(((g - e).abs() <= tol.atol + tol.rtol * e.abs()).all())


def _picture(exc: CheckFailed, items: list[Expected], case, dtype: torch.dtype) -> None:
    """On a wrong dv, the weights P it was built from (dv = P^T d_out, solved for P: d_out has full
    row rank when d_v >= L_q), beside exp(s - lse); else on a wrong dk, the dS it was built from
    (dk = dS^T q / sqrt(d_k), d_k >= L_q). Pictures the values of float32 and float64 calls only."""
    diag = exc.diagnosis
    if diag.kind not in ("values", "nonfinite") or dtype not in (torch.float32, torch.float64):
        return
    L_q, tol = case.sizes["L_q"], TOLERANCES[dtype]
    _, dk, dv = items
    if any(tuple(it.got.shape) != tuple(it.value.shape) for it in items):
        return
    p = variants.weights(case.q, case.k, case.lse, case.causal)                          # (..., L_q, L_k)
    axes = case.axes("L_q", "L_k")
    if _wrong(dv, tol) and case.sizes["d_v"] >= L_q:
        implied = (dv.got.detach().to(torch.float64) @ torch.linalg.pinv(case.d_out)).transpose(-2, -1)
        pictures.attach(diag, implied, p, what="P that your dv was built from (dv = P^T d_out)", axes=axes,
                        atol=1e-4, rtol=1e-4)
    elif _wrong(dk, tol) and case.sizes["d_k"] >= L_q:
        scale = 1 / math.sqrt(case.sizes["d_k"])
        dp = case.d_out @ case.v.transpose(-2, -1)                                       # (..., L_q, L_k)
        ds = p * (dp - (case.d_out * case.out).sum(-1, keepdim=True))
        implied = (dk.got.detach().to(torch.float64) @ torch.linalg.pinv(case.q)).transpose(-2, -1) / scale
        pictures.attach(diag, implied, ds, what="dS that your dk was built from (dk = dS^T q / sqrt(d_k))",
                        axes=axes, atol=1e-4, rtol=1e-4)


def check_grads(submission, case, *, block_size=BLOCK, dtype=torch.float32, device="cpu",
                tol: Tolerance | None = None, named=True, **options):
    """The learner's (dq, dk, dv) on ``case`` against the float64 truth, stage by stage: all shapes,
    then dtypes, then devices, then values, each against the known mistakes. Returns the CallResult."""
    result, got = backward(submission, case, block_size=block_size, dtype=dtype, device=device, **options)
    bs = block_size or 64
    items = expected_items(case, got, block_size=bs, tol=tol, named=named)
    with shape_hints(case, bs):
        expect.shapes(items, sizes=axis_sizes(case))
    try:
        expect.tensors(items, sizes=axis_sizes(case), dtype=dtype, device=device)
    except CheckFailed as exc:
        _picture(exc, items, case, dtype)
        raise
    return result


# -------------------------------------------------------------------------------------------------
# The contract


@pytest.mark.group("contract")
def test_signature(submission):
    """flash_attention_backward has the stub's parameters and defaults"""
    expect.signature(submission, FN, list(PARAMS), defaults={"causal": "False", "block_size": "64"})


@pytest.mark.group("contract")
def test_returns_three_gradients(submission, seed, device):
    """returns a triple (dq, dk, dv)"""
    backward(submission, case_for(seed), device=device)


# -------------------------------------------------------------------------------------------------
# Shapes, batched and unbatched


@pytest.mark.group("shapes")
@pytest.mark.parametrize("batch_axes", [("B", "H"), ()], ids=["4d", "2d"])
def test_shapes(submission, seed, device, batch_axes):
    """dq like q, dk like k, dv like v"""
    case = case_for(seed, batch_axes=batch_axes)
    _, got = backward(submission, case, device=device)
    with shape_hints(case, BLOCK):
        expect.shapes(expected_items(case, got, block_size=BLOCK, named=False), sizes=axis_sizes(case))


# -------------------------------------------------------------------------------------------------
# Values (non-causal)


@pytest.mark.group("values")
def test_values(submission, seed, device):
    """dq, dk, dv match the reference (block_size 3, partial last blocks)"""
    check_grads(submission, case_for(seed), device=device)


@pytest.mark.group("values")
def test_values_default_block_size(submission, seed, device):
    """the default block_size (64), lengths past one block, non-contiguous inputs left unchanged"""
    case = case_for(seed, batch_axes=("B",), L_q=70, L_k=150)
    result = check_grads(submission, case, block_size=None, device=device, noncontiguous=True, echo_args=True)
    after = result.args_after
    sent = case.args(torch.float32)
    if not isinstance(after, tuple) or len(after) != len(sent):
        raise fail("protocol", "the worker did not send the arguments back after the call")
    for name, before, now in zip(PARAMS, sent, after):
        if not isinstance(now, torch.Tensor) or now.shape != before.shape or now.dtype != before.dtype \
                or not torch.equal(now, before):
            raise fail("side-effect", f"your function modified its input {name} in place",
                       hint="The caller still needs q, k, v, out, lse and d_out: use out-of-place operations "
                            "(x = x * s, not x *= s; masked_fill, not masked_fill_), and write only into dq, dk "
                            "and dv, which you create.")


# -------------------------------------------------------------------------------------------------
# Causal, aligned bottom-right (query i at key position L_k - L_q + i)


CAUSAL_CASES = [({}, BLOCK), ({"L_q": 11, "L_k": 11}, 4)]


@pytest.mark.group("causal")
@pytest.mark.parametrize("sizes,block_size", CAUSAL_CASES, ids=["rectangular", "square"])
def test_causal(submission, seed, device, sizes, block_size):
    """causal=True: the mask aligned bottom-right, diagonal blocks masked"""
    check_grads(submission, case_for(seed, causal=True, **sizes), block_size=block_size, device=device)


# -------------------------------------------------------------------------------------------------
# Any block size gives the same, exact result


@pytest.mark.group("blocks")
@pytest.mark.parametrize("block_size", [1, 64], ids=["1-causal", "64-causal"])
def test_block_sizes(submission, seed, device, block_size):
    """exact for block_size 1 and for one block larger than both lengths"""
    # block_size 1 on 4 queries and 6 keys: every block is one query or one key already, and the
    # learner's loop runs 24 times per call instead of 119.
    sizes = {"L_q": 4, "L_k": 6} if block_size == 1 else {}
    check_grads(submission, case_for(seed, causal=True, **sizes), block_size=block_size, device=device)


# -------------------------------------------------------------------------------------------------
# Dtypes


@pytest.mark.group("dtypes")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16], ids=["float64", "float16", "bfloat16"])
def test_dtype(submission, seed, device, dtype):
    """dq, dk, dv in q's dtype (lse comes in float32 for float16/bfloat16)"""
    # Bounded inputs, and the truth computed from them as rounded to ``dtype`` (as exercise 1).
    case = case_for(seed, causal=True, bound=2.0, **DTYPE_SIZES).rounded(dtype)
    check_grads(submission, case, dtype=dtype, device=device)


# -------------------------------------------------------------------------------------------------
# Memory: linear in L, measured by the harness


QUADRATIC_HINT = ("Never build an (L_q, L_k) tensor (scores, P, dP, dS or a mask): take one block of keys and one "
                  "block of queries at a time (tiles (..., block_size, block_size)), recompute that block's P from "
                  "lse, and add its part to dq, dk and dv. Memory then grows like L, not L^2.")


PROOF = LinearMemory(counted_L=COUNTED_L, memory_L=MEMORY_L, confirm_L=CONFIRM_L, hint=QUADRATIC_HINT)


def _sampled_rows(seed: int, L: int, stream: int) -> torch.Tensor:
    """SAMPLED_ROWS rows of L, drawn from the seed, sorted."""
    gen = torch.Generator().manual_seed(seed * 3 + stream)
    return torch.randperm(L, generator=gen)[:SAMPLED_ROWS].sort().values


def check_rows(submission, case, seed: int, *, device: str, block_size=MEMORY_BLOCK, **options):
    """A long call: the three shapes in full, then dtypes, devices and the values of dq at sampled
    query rows and of dk, dv at sampled key rows, against the float64 truth of those rows alone.
    The rows are drawn from the test's seed: code cannot know which they are."""
    L_q, L_k = case.sizes["L_q"], case.sizes["L_k"]
    q_rows, k_rows = _sampled_rows(seed, L_q, 0), _sampled_rows(seed, L_k, 1)
    exp = cases.sampled_truth(case, q_rows, k_rows)
    result, got = backward(submission, case, block_size=block_size, device=device, **options)
    sizes = axis_sizes(case)
    got = [expect.is_tensor(g, what) for g, what in zip(got, OUTPUTS)]
    full = ((*case.q.shape[:-1], case.sizes["d_k"]), (*case.k.shape[:-1], case.sizes["d_k"]),
            (*case.k.shape[:-1], case.sizes["d_v"]))
    axes = (case.axes("L_q", "d_k"), case.axes("L_k", "d_k"), case.axes("L_k", "d_v"))
    for g, shape, what, ax in zip(got, full, OUTPUTS, axes):
        expect.shape(g, shape, what=what, axes=ax, sizes=sizes)
    for g, e, what, rows, ax in zip(got, exp, OUTPUTS, (q_rows, k_rows, k_rows), axes):
        part = g[..., rows, :]
        part.lumen_meta = meta(g)                      # what the worker said of g (its device)
        expect.tensors([Expected(part, e, f"{what} (sampled rows)", ("rows", ax[-1]), tol=LONG_TOL)],
                       sizes=sizes, dtype=torch.float32, device=device)
    return result


def _long_case(seed: int, L: int, causal: bool):
    return cases.backward_case(seed, causal=causal, L_q=L, L_k=L, **MEMORY_SIZES)


def _memory_readings(submission, seed: int, long_cases, device: str) -> dict:
    """The harness's MemoryUse of two calls on ``long_cases`` (non-causal "long", then causal), each
    checking its values on sampled rows (a fast wrong answer proves nothing)."""
    plain, causal = long_cases

    def call(case):
        return lambda: check_rows(submission, case, seed, device=device, measure_memory=True)

    return PROOF.readings(plain.sizes["L_q"], {"long": call(plain), "causal": call(causal)})


@pytest.mark.group("memory")
def test_memory_linear_in_length(submission, seed):
    """memory grows linearly with L (measured by the grader)"""
    device = "cpu"
    # 0. The values at a short length first: code whose values are wrong fails here in milliseconds,
    #    before a fresh worker and the long calls are paid for (they check values too).
    short = cases.backward_case(seed, causal=True, **{**MEMORY_SIZES, **SHORT_SIZES})
    check_grads(submission, short, block_size=COUNTED_BLOCK, device=device, tol=LONG_TOL, named=False)
    # In a fresh worker, on the CPU: the baseline is what torch alone holds, not what earlier tests
    # loaded; and the harness measures host memory.
    submission.fresh_worker()
    # The long inputs (their forwards in float64) are made while the fresh worker starts.
    counted = _long_case(seed, COUNTED_L, True)
    long_cases = cases.both_cases(seed, L_q=MEMORY_L, L_k=MEMORY_L, **MEMORY_SIZES)
    # 1. The work counter (the worker's: a hint that can only fail): no intermediate of O(L^2) elements.
    PROOF.check_counted(check_rows(submission, counted, seed, device=device, block_size=COUNTED_BLOCK,
                                   count_ops=True).ops)
    # 2. The proof, from the harness's side: the peak memory of the worker (every process it forks
    #    included) over each call, beyond what it held at start. Over the budget at L = 4096, the
    #    same calls at 8192 decide (src/lumen_ex/graders/support/memory_proof.py).
    PROOF.prove(lambda L: _memory_readings(
        submission, seed, long_cases if L == MEMORY_L else cases.both_cases(seed, L_q=L, L_k=L, **MEMORY_SIZES),
        device))


# -------------------------------------------------------------------------------------------------
# Cost: causal skips the blocks entirely in the future


def needed_pairs(L_q: int, L_k: int, block_size: int) -> tuple[int, int]:
    """(block pairs causal attention needs, all block pairs), blocks aligned at 0 on both axes: the
    pair of query block [i0, i1) and key block [j0, j1) is needed unless j0 > L_k - L_q + i1 - 1."""
    needed = total = 0
    for i0 in range(0, L_q, block_size):
        i1 = min(i0 + block_size, L_q)
        for j0 in range(0, L_k, block_size):
            total += 1
            needed += j0 <= L_k - L_q + i1 - 1
    return needed, total


# The work, as the worker's counter measures it (src/lumen_ex/sandbox/inside/work_counter.py): the FLOPs
# of the matrix products, where the blocks of s, dP, dv, dk and dq are made, and the elements every
# operation produces, which also sees work done without a matrix product (broadcast-multiply-sum).
# Both must fit; code that makes no matrix product at all is measured by its elements alone.
WORK_MEASURES = {"matmul_flops": "FLOPs of its matrix products", "total_elements": "tensor elements its operations produce"}


@pytest.mark.group("cost")
def test_causal_skips_future_blocks(submission, seed, device):
    """causal=True skips the blocks entirely in the future"""
    # The work counter runs in the learner's process: a low count passes this test, and only the source
    # scan (which refuses code that could reach the counter) stands behind it (work_counter.py).
    counts = {}
    for causal in (False, True):
        case = cases.backward_case(seed, causal=causal, L_q=COST_L, L_k=COST_L, **COST_SIZES)
        result = check_grads(submission, case, block_size=COST_BLOCK, device=device, tol=LONG_TOL, named=False,
                             count_ops=True)
        if not isinstance(result.ops, dict) or not all(isinstance(result.ops.get(k), int) for k in WORK_MEASURES):
            raise fail("protocol", "the worker did not report how much work the call did")
        counts[causal] = {k: int(result.ops[k]) for k in WORK_MEASURES}
    needed, total = needed_pairs(COST_L, COST_L, COST_BLOCK)
    for measure, words in WORK_MEASURES.items():
        full, done = counts[False][measure], counts[True][measure]
        if full == 0 and measure == "matmul_flops":
            continue    # no matrix product at all: the elements decide
        ideal = full * needed / total
        budget = ideal + (full - ideal) / 2
        if done > budget:
            share, allowed = done / max(full, 1), budget / max(full, 1)
            raise fail("property", f"with causal=True your code does {share:.0%} of the non-causal work at L = {COST_L} "
                       f"(the {words}; block_size {COST_BLOCK}: {needed} of {total} block pairs are needed): it "
                       "computes the blocks entirely in the future and masks them", expected=f"at most {allowed:.0%}",
                       got=round(share, 3),
                       details={measure: {"causal": done, "non_causal": full}, "L": COST_L, "block_size": COST_BLOCK,
                                "needed_pairs": needed, "all_pairs": total},
                       misconception="future-blocks-computed",
                       hint="The query block [i0, i1) has its last query at key position L_k - L_q + i1 - 1: a key block "
                            "starting after it (j0 > L_k - L_q + i1 - 1) is entirely in its future, so skip that pair "
                            "(continue) and mask only the blocks that cross the diagonal.")


# -------------------------------------------------------------------------------------------------
# CUDA (worth no points: not every machine has a GPU)


@pytest.mark.group("cuda")
def test_cuda(submission, seed, cuda):
    """runs on the GPU"""
    check_grads(submission, case_for(seed, causal=True), device=cuda)

"""Hidden suite for exercise 8: attention_backward, the gradients of attention written by hand.

Every test builds seeded float64 inputs on the CPU (src/lumen_ex/exercises/08-attention-backward/suite/cases.py),
computes the expected gradients from them with torch.autograd here in the trusted harness, sends
the inputs (cast to the dtype under test) to the learner's code through ``submission``, and checks
what came back shape first, then dtype and device, then values, in the order dq, dk, dv. The
learner's worker runs with autograd off (exercise.toml ``autograd = false``): every way of turning
it back on is refused as a forbidden call. The docstring's first line is what the learner sees as
the test's name.

Axis names in feedback: the leading axes (B, H, and G for the 5-D case), L_q queries, L_k keys (L
for both in a square case), d_k the width of q and k, d_v the width of v and d_out.
"""

from __future__ import annotations

import re

import pytest
import torch

from lumen_ex.author import CheckFailed, Expected, exercise, expect, fail, sibling

mistakes = exercise(__file__).mistakes
cases = sibling(__file__, "suite/cases")

FN = "attention_backward"
PARAMS = ["q", "k", "v", "d_out", "causal"]
OUTPUTS = ("dq", "dk", "dv")

MATMUL_MISMATCH = re.compile(r"Expected size for first two dimensions|cannot be multiplied|must match the size")
TRANSPOSED = re.compile(r"transpose|swapaxes|swapdims|permute|einsum|\.mT\b|\.T\b|\.t\(\)")


def _untransposed(name: str, other: str):
    """A matmul size mismatch on a line that assigns ``name`` from ``other`` with no transpose in
    sight (dv = P @ d_out, dk = dS @ q): fewer queries than keys make the product impossible."""
    assigns = re.compile(rf"^\s*{name}\w*\s*=[^=]")

    def holds(exc) -> bool:
        line = expect.failing_line(exc)
        return (bool(assigns.search(line)) and other in line and not TRANSPOSED.search(line)
                and bool(MATMUL_MISMATCH.search(exc.message)))
    return holds


NAMED_EXCEPTIONS = [
    ("dv-no-transpose", "dv = P @ d_out multiplies (L_q, L_k) by (L_q, d_v), which only fits when L_q == L_k: "
     "dv = P.transpose(-2, -1) @ d_out, (L_k, L_q) @ (L_q, d_v): key j collects the d_out of every query "
     "that read it", _untransposed("dv", "d_out")),
    ("dk-no-transpose", "dk = dS @ q multiplies (L_q, L_k) by (L_q, d_k), which only fits when L_q == L_k: "
     "dk = dS.transpose(-2, -1) @ q / sqrt(d_k), (L_k, L_q) @ (L_q, d_k)", _untransposed("dk", "q")),
]


def call(submission, case, *, dtype=torch.float32, device="cpu", **options):
    """Call the learner's attention_backward on ``case``: the CallResult and its (dq, dk, dv)."""
    with expect.exceptions_named(NAMED_EXCEPTIONS):
        result = submission.call(FN, case.args(dtype), device=device, **options)
    return result, expect.returns(result.value, OUTPUTS, FN)


def items(got, case) -> list[Expected]:
    """The three gradients with their expected values (autograd, float64), axes and known mistakes."""
    expected = case.expected()
    axes = (case.axes("L_q", "d_k"), case.axes("L_k", "d_k"), case.axes("L_k", "d_v"))
    return [Expected(g, e, name, ax, variants_of(case, i))
            for i, (g, e, name, ax) in enumerate(zip(got, expected, OUTPUTS, axes))]


def variants_of(case, which: int):
    """The known wrong answers for gradient ``which`` (0 dq, 1 dk, 2 dv), computed when needed."""
    return lambda: mistakes.grad_variants(*case.tensors(), case.causal, which=which)


def check_gradients(submission, case, *, dtype=torch.float32, device="cpu", **options):
    """The learner's (dq, dk, dv) must match autograd's on ``case``; a wrong one is drawn as the dS (or
    P) it implies."""
    result, got = call(submission, case, dtype=dtype, device=device, **options)
    checked = items(got, case)
    try:
        expect.tensors(checked, sizes=case.sizes, dtype=dtype, device=device)
    except CheckFailed as exc:
        diag = exc.diagnosis
        which = next((i for i, it in enumerate(checked) if diag.summary.startswith(it.what)), None)
        if diag.kind in ("values", "nonfinite") and which is not None:
            cases.picture(exc, which, checked[which].got, case, expect.TOLERANCES[dtype])
        raise
    return result


# -------------------------------------------------------------------------------------------------
# The contract and the shapes


@pytest.mark.group("contract")
def test_signature(submission):
    """attention_backward has the stub's parameters"""
    expect.signature(submission, FN, PARAMS, defaults={"causal": "False"})


@pytest.mark.group("shapes")
@pytest.mark.parametrize("batch_axes", [(), ("B", "G", "H")], ids=["2d", "5d"])
def test_shapes(submission, seed, device, batch_axes):
    """dq, dk, dv shaped like q, k, v, with any leading axes"""
    case = cases.case(seed, batch_axes=batch_axes, G=4)
    _, got = call(submission, case, device=device)
    expect.shapes([Expected(expect.is_tensor(g, it.what), it.value, it.what, it.axes)
                   for g, it in zip(got, items(got, case))], sizes=case.sizes)


# -------------------------------------------------------------------------------------------------
# Values


@pytest.mark.group("values")
def test_values(submission, seed, device):
    """dq, dk, dv match autograd's (L_q < L_k, float32)"""
    check_gradients(submission, cases.case(seed), device=device)


@pytest.mark.group("values")
def test_values_square(submission, seed, device):
    """as many queries as keys (L_q = L_k)"""
    # Square, a transpose forgotten (dv = P @ d_out, dk = dS @ q) still runs: its values name it.
    check_gradients(submission, cases.case(seed, batch_axes=("B",), L_q=7, L_k=7, d_v=9), device=device)


@pytest.mark.group("values")
def test_values_realistic_size(submission, seed, device):
    """realistic sizes (d_k = 64, L_q = 48, L_k = 80)"""
    check_gradients(submission, cases.case(seed, H=4, L_q=48, L_k=80, d_k=64, d_v=32), device=device)


# -------------------------------------------------------------------------------------------------
# The causal mask, bottom-right


CAUSAL = {
    "rectangular": dict(),                                                    # (B, H, 5, 7): query i at 2 + i
    "square": dict(batch_axes=("B",), L_q=7, L_k=7, d_v=9),
    "single-query": dict(batch_axes=("B", "G", "H"), G=4, L_q=1, L_k=9, d_k=10),   # sees every key
}


@pytest.mark.group("causal")
@pytest.mark.parametrize("kind", list(CAUSAL))
def test_causal(submission, seed, device, kind):
    """causal=True: the mask aligned bottom-right, in the backward too"""
    check_gradients(submission, cases.case(seed, causal=True, **CAUSAL[kind]), device=device)


# -------------------------------------------------------------------------------------------------
# Properties


@pytest.mark.group("properties")
def test_shift_invariance(submission, seed, device):
    """dk sums to 0 over the keys; dv sums to d_out's sum"""
    # softmax(s + c) = softmax(s): adding one vector to every key adds the same number to each row
    # of scores, so it changes nothing, and the gradient of k summed over the keys is exactly 0. The
    # rows of P sum to 1, so dv = P^T d_out summed over the keys is d_out summed over the queries.
    # Both hold for the right answer whatever the inputs (to float32 rounding, ~1e-6).
    case = cases.case(seed, causal=True)
    _, got = call(submission, case, device=device)
    expect.shapes([Expected(g, it.value, it.what, it.axes) for g, it in zip(got, items(got, case))],
                  sizes=case.sizes)
    dk, dv = (g.to(torch.float64) for g in got[1:])
    drift = float(dk.sum(dim=-2).abs().max())
    if not drift <= 1e-4:                      # NaN fails too
        raise fail("property", f"dk summed over the keys is {drift:.3g} somewhere, not 0: adding one vector to "
                   "every key changes no softmax, so it cannot change the loss", expected=0.0, got=drift,
                   hint="Every row of dS must sum to 0, and two things make it so: the softmax's row term, "
                        "dS = P * (dP - (dP * P).sum(dim=-1, keepdim=True)), and P itself normalised over "
                        "the keys (a softmax over the last axis, each row of P summing to 1): "
                        "rowsum(dS) = rowsum(P * dP) * (1 - rowsum(P)).")
    gap = float((dv.sum(dim=-2) - case.d_out.sum(dim=-2)).abs().max())
    if not gap <= 1e-4:
        raise fail("property", f"dv summed over the keys differs from d_out summed over the queries by {gap:.3g}: "
                   "each query's weights sum to 1, so together the keys receive exactly its d_out",
                   expected=0.0, got=gap,
                   hint="dv = P^T @ d_out with P the masked softmax, each row summing to 1 (future keys exactly 0).")


@pytest.mark.group("properties")
def test_noncontiguous_inputs(submission, seed, device):
    """non-contiguous inputs (reshape, not view)"""
    check_gradients(submission, cases.case(seed, causal=True), device=device, noncontiguous=True)


@pytest.mark.group("properties")
def test_inputs_unchanged(submission, seed, device):
    """inputs are not modified in place"""
    case = cases.case(seed, causal=True)
    sent = case.args(torch.float32)
    result = submission.call(FN, sent, echo_args=True, device=device)
    for name, before, after in zip(PARAMS, sent, result.args_after or ()):
        if not isinstance(before, torch.Tensor):
            continue
        if (not isinstance(after, torch.Tensor) or after.shape != before.shape
                or after.dtype != before.dtype or not torch.equal(after, before)):
            raise fail("side-effect", f"your function modified its input {name} in place",
                       hint="Use out-of-place operations: q = q * scale, not q *= scale or q.mul_(scale); "
                            "masked_fill, not masked_fill_.",
                       misconception="inputs-modified")


# -------------------------------------------------------------------------------------------------
# Dtypes and devices


@pytest.mark.group("dtypes")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16], ids=["float64", "float16", "bfloat16"])
def test_dtype(submission, seed, device, dtype):
    """keeps the inputs' dtype"""
    # Bounded inputs, and the reference computed from them as rounded to ``dtype``: what is left is
    # the learner's arithmetic, well inside the tolerance at every seed (suite/cases.py DTYPE_SIZES).
    check_gradients(submission, cases.dtype_case(seed).rounded(dtype), dtype=dtype, device=device)


@pytest.mark.group("dtypes")
def test_runs_on_meta(submission, seed):
    """works on the inputs' device (checked on meta)"""
    # q, k, v, d_out on meta: a mask made without device=q.device meets them in one operation and torch
    # raises (named "new-tensor-device"), as it would on a GPU. Meta tensors have no values.
    case = cases.case(seed, causal=True)
    _, got = call(submission, case, device="meta")
    expect.tensors(items(got, case), sizes=case.sizes, dtype=torch.float32, device="meta")


# -------------------------------------------------------------------------------------------------
# CUDA (worth no points: not every machine has a GPU)


@pytest.mark.group("cuda")
def test_cuda(submission, seed, cuda):
    """runs on the GPU"""
    check_gradients(submission, cases.case(seed, causal=True), device=cuda)

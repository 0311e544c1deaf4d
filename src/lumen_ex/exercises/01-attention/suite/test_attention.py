"""Hidden suite for exercise 1: scaled_dot_product_attention and causal_mask.

Every test builds seeded float64 inputs on the CPU, computes the reference from them, sends the
inputs (cast to the dtype under test) to the learner's code through ``submission``, and checks what
came back shape first. The docstring's first line is what the learner sees as the test's name.
"""

from __future__ import annotations

import re

import pytest
import torch

from lumen_ex.author import CheckFailed, Expected, Tolerance, exercise, expect, fail, inputs, pictures

ref = exercise(__file__).reference
causal_variants, output_variants = exercise(__file__).mistakes.causal_variants, exercise(__file__).mistakes.output_variants

SDPA = "scaled_dot_product_attention"
EXACT = Tolerance(0.0, 0.0)
# Tiny, all distinct: the gradient check runs in float64.
GRADIENT_SIZES = {"B": 2, "H": 3, "L_q": 4, "L_k": 5, "d_k": 7, "d_v": 6}
# Inputs scaled by 8 give scaled scores of standard deviation 64: many above 88.7, where exp()
# overflows in float32. The float32 arithmetic on scores that large is good to about 1e-4.
LARGE_SCALE = 8.0
LARGE_TOL = Tolerance(1e-3, 1e-3)
# The future key planted in the leakage test: a masked score of 300, far above the allowed ones
# (unit-variance): every allowed weight of a softmax taken over all keys underflows to 0 in float32.
LEAK_SCORE = 300.0
# For the dtype tests: float16 and bfloat16 are matched at 1e-2 and 2e-2, so the known mistakes must be
# far apart. With d_k = 16 and d_v = 4 the scales 1/sqrt(d_k) = 1/4 and 1/sqrt(d_v) = 1/2 are a factor
# 2 apart (with the default d_k = 8, d_v = 6 only 1.15) and every mistake is at least ~12 bfloat16
# tolerances from the reference and from every other (tests/e2e/test_variants.py).
DTYPE_SIZES = {"d_k": 16, "d_v": 4}


def _transposes_fixed_axes(exc) -> bool:
    """A size mismatch raised on a line that transposes more than the last two axes: x.T (every axis
    of a batched tensor), x.t(), or transpose / swapaxes of other axes than -2 and -1."""
    if not re.search(r"must match the size|Expected size for first two dimensions|cannot be multiplied|"
                     r"t\(\) expects a tensor with <= 2 dimensions", exc.message):
        return False
    line = expect.failing_line(exc)
    if re.search(r"\.T\b|\.t\(\)", line):
        return True
    for a, b in re.findall(r"(?:transpose|swapaxes|swapdims)\(\s*(-?\d+)\s*,\s*(-?\d+)\s*\)", line):
        if {int(a), int(b)} != {-2, -1}:
            return True
    return False


def _numpy_bfloat16(exc) -> bool:
    """NumPy refused the tensor: it has no bfloat16, and it holds only CPU data (a meta or CUDA
    tensor cannot become an array, nor be copied out for one with .cpu())."""
    refused = re.search(r"unsupported ScalarType BFloat16|can't convert \w+ device type tensor to numpy|"
                        r"Cannot copy out of meta tensor", exc.message)
    return bool(refused) and "numpy" in expect.failing_line(exc)


def _json_number(x: float):
    """A number for a diagnosis field: NaN and inf as text (JSON has no NaN)."""
    return x if x == x and abs(x) != float("inf") else str(x)


# Exceptions whose cause is recognisable: (misconception, sentence, predicate).
NAMED_EXCEPTIONS = [
    ("fixed-axes-transposed", "the line that failed transposes axes other than the last two (k.T on a batched "
     "tensor reverses every axis, (B, H, L_k, d_k) -> (d_k, L_k, H, B)): swap only the last two, "
     "k.transpose(-2, -1) or k.mT", _transposes_fixed_axes),
    ("numpy-round-trip", "your code goes through NumPy, which has no bfloat16, works only on CPU data (not on the "
     "inputs' device) and cuts the autograd graph: compute in torch throughout", _numpy_bfloat16),
]


def attend(submission, case, *, dtype=torch.float32, device="cpu", **options):
    """Call the learner's attention on ``case`` and return the CallResult and its (output, weights)."""
    q, k, v = case.cast(dtype)
    kwargs = {} if case.mask is None else {"mask": case.mask}
    with expect.exceptions_named(NAMED_EXCEPTIONS):
        result = submission.call(SDPA, (q, k, v), kwargs, device=device, **options)
    return result, expect.returns(result.value, ("output", "weights"), SDPA)


def check_attention(submission, case, *, dtype=torch.float32, device="cpu", tol=None, **options):
    """The learner's (output, weights) must match the float64 reference on ``case``."""
    result, (out, weights) = attend(submission, case, dtype=dtype, device=device, **options)
    exp_out, exp_w = ref.scaled_dot_product_attention(case.q, case.k, case.v, case.mask)
    expect.tensors([
        Expected(out, exp_out, "output", case.axes("L_q", "d_v"),
                 lambda: output_variants(case.q, case.k, case.v, case.mask, which=0, dtype=dtype), tol),
        Expected(weights, exp_w, "weights", case.axes("L_q", "L_k"),
                 lambda: weight_variants(case, exp_out, dtype, tol), tol),
    ], sizes=case.sizes, dtype=dtype, device=device)
    return result


def pictured(failure, got_weights, given, case):
    """``failure`` with the expected and the learner's attention weights drawn side by side (rows =
    queries, columns = keys); the expected ones computed from ``given`` (q, k, v, mask)."""
    exp_w = ref.scaled_dot_product_attention(given.q, given.k, given.v, given.mask)[1]
    return pictures.attach(failure, got_weights, exp_w, what="weights", axes=case.axes("L_q", "L_k"))


def weight_variants(case, exp_out, dtype, tol=None):
    """The mistakes that can explain wrong weights: those that leave the output right. The output is
    checked first, so when the weights are reached it equals the reference: a mistake that changes
    the output too (a wrong scale, a mask bug) is not what happened."""
    outs = output_variants(case.q, case.k, case.v, case.mask, which=0, dtype=dtype)
    mtol = expect.match_tolerance(dtype, tol or expect.TOLERANCES[dtype])
    changes_output = {v.name for v in expect.candidates(exp_out, outs, mtol)}
    return [w for w in output_variants(case.q, case.k, case.v, case.mask, which=1, dtype=dtype)
            if w.name not in changes_output]


# -------------------------------------------------------------------------------------------------
# The contract


@pytest.mark.group("contract")
def test_functions_defined(submission):
    """both functions have the stub's parameters"""
    expect.signature(submission, SDPA, ["q", "k", "v", "mask"], defaults={"mask": "None"})
    expect.signature(submission, "causal_mask", ["L_q", "L_k", "device"], defaults={"L_k": "None", "device": "None"})


@pytest.mark.group("contract")
def test_returns_output_and_weights(submission, seed, device):
    """returns a pair (output, weights)"""
    attend(submission, inputs.attention_case(seed), device=device)


# -------------------------------------------------------------------------------------------------
# Shapes, batched and unbatched


@pytest.mark.group("shapes")
@pytest.mark.parametrize("batch_axes", [("B", "H"), ("B",), ()], ids=["4d", "3d", "2d"])
def test_shapes(submission, seed, device, batch_axes):
    """output (..., L_q, d_v), weights (..., L_q, L_k)"""
    case = inputs.attention_case(seed, batch_axes=batch_axes)
    _, (out, weights) = attend(submission, case, device=device)
    exp_out, exp_w = ref.scaled_dot_product_attention(case.q, case.k, case.v)
    expect.shapes([Expected(expect.is_tensor(out, "output"), exp_out, "output", case.axes("L_q", "d_v")),
                   Expected(expect.is_tensor(weights, "weights"), exp_w, "weights", case.axes("L_q", "L_k"))],
                  sizes=case.sizes)


# -------------------------------------------------------------------------------------------------
# Values without a mask


@pytest.mark.group("values")
@pytest.mark.parametrize("batch_axes", [("B", "H"), ()], ids=["4d", "2d"])
def test_values(submission, seed, device, batch_axes):
    """values match the reference (float32)"""
    check_attention(submission, inputs.attention_case(seed, batch_axes=batch_axes), device=device)


@pytest.mark.group("values")
def test_values_single_query(submission, seed, device):
    """a single query (L_q = 1)"""
    check_attention(submission, inputs.attention_case(seed, L_q=1, L_k=9), device=device)


@pytest.mark.group("values")
def test_values_realistic_size(submission, seed, device):
    """realistic sizes (d_k = 64, L_k = 80)"""
    case = inputs.attention_case(seed, B=2, H=4, L_q=48, L_k=80, d_k=64, d_v=32)
    check_attention(submission, case, device=device)


# -------------------------------------------------------------------------------------------------
# Masks


# Every mask shape the contract allows ("broadcasts to (..., L_q, L_k)"), for q, k, v (B, H, L, d):
# full (B, H, L_q, L_k); broadcast (L_q, L_k), one for all; heads (B, 1, L_q, L_k), one per batch
# item; per-head (H, L_q, L_k), one per head; padding (B, 1, 1, L_k), keys hidden from every query.
MASK_KINDS = ["full", "broadcast", "heads", "per-head", "padding"]


@pytest.mark.group("masks")
@pytest.mark.parametrize("kind", MASK_KINDS)
def test_mask(submission, seed, device, kind):
    """a bool mask hides the keys marked False"""
    check_attention(submission, inputs.attention_case(seed, mask=kind), device=device)


@pytest.mark.group("masks")
def test_masked_weights_are_zero(submission, seed, device):
    """masked keys get exactly zero weight"""
    case = inputs.masked_scores_case(seed)   # scores near -24: the answer cannot depend on the seed
    _, (_, weights) = attend(submission, case, device=device)
    expect.shape(weights, case.mask.shape, what="weights", axes=case.axes("L_q", "L_k"), sizes=case.sizes)
    leaked = weights.to(torch.float64).masked_fill(case.mask, 0).abs()
    if not float(leaked.max()) == 0:   # written so that NaN fails too
        worst = torch.nan_to_num(leaked, nan=float("inf"))             # NaN is the worst leak
        idx = [int(i) for i in (worst == worst.max()).nonzero()[0]]
        failure = fail("property", f"a masked key still gets weight {float(leaked.max()):.3g} at {idx}",
                       expected=0.0, got=_json_number(float(leaked.max())), details={"index": idx},
                       hint="Set masked scores to float('-inf') before the softmax: exp(-inf) is exactly 0.",
                       misconception="masked-key-weight")
        raise pictured(failure, weights, case, case)


# -------------------------------------------------------------------------------------------------
# The causal mask


@pytest.mark.group("causal")
@pytest.mark.parametrize("L_q,L_k", [(6, None), (4, 7), (1, 5), (5, 5), (5, 3)],
                         ids=["square", "rectangular", "single-query", "explicit-square", "more-queries"])
def test_causal_mask(submission, device, L_q, L_k):
    """causal_mask: bool, aligned bottom-right"""
    # more-queries: L_q > L_k, so queries 0 .. L_q - L_k - 1 sit before the first key and see none:
    # their rows are all False (src/lumen_ex/exercises/01-attention/README.md, "Rows with no allowed key").
    got = submission.causal_mask(L_q, L_k) if L_k is not None else submission.causal_mask(L_q)
    L_k = L_q if L_k is None else L_k
    expected = ref.causal_mask(L_q, L_k)
    sizes = {"L_q": L_q, "L_k": L_k} if L_q != L_k else {"L": L_q}
    axes = ("L_q", "L_k") if L_q != L_k else ("L", "L")
    try:
        expect.tensor(got, expected, what="causal_mask", axes=axes, sizes=sizes, dtype=torch.bool,
                      device="cpu", tol=EXACT, variants=lambda: causal_variants(L_q, L_k))
    except CheckFailed as exc:
        _name_dropped_rows(exc.diagnosis, L_q, L_k)
        raise


def _name_dropped_rows(diag, L_q: int, L_k: int) -> None:
    """A (rows, L_k) mask with fewer than L_q rows when L_q > L_k: the rows that see no key were
    left out (e.g. the last L_q rows of a square (L_k, L_k) mask, of which there are only L_k)."""
    got = diag.got if diag.kind == "shape" and isinstance(diag.got, list) else []
    if L_q > L_k and len(got) == 2 and got[1] == L_k and got[0] < L_q:
        diag.misconception = "causal-empty-rows-dropped"
        diag.hint = (f"causal_mask({L_q}, {L_k}) has {L_q} rows, one per query: the first {L_q - L_k} queries "
                     "sit before the first key and see none, so their rows are all False. Build the mask from "
                     "positions, torch.arange(L_k)[None, :] <= torch.arange(L_q)[:, None] + (L_k - L_q), not by "
                     "slicing a square one")


@pytest.mark.group("causal")
def test_causal_mask_on_device(submission, device):
    """causal_mask on the device it is given"""
    got = submission.call("causal_mask", (3, 5), {"device": torch.device(device)}, device=device).value
    expect.tensor(got, ref.causal_mask(3, 5), what="causal_mask", axes=("L_q", "L_k"),
                  sizes={"L_q": 3, "L_k": 5}, dtype=torch.bool, device=device, tol=EXACT,
                  variants=lambda: causal_variants(3, 5))


@pytest.mark.group("causal")
def test_causal_mask_on_meta(submission):
    """causal_mask honours device= (checked on meta)"""
    # The meta device exists on every machine: its tensors have a shape, a dtype and a device but no
    # data, and they come back through the pipe as such (src/lumen_ex/sandbox/inside/wire.py), so a causal_mask that
    # ignores device= fails here without a GPU. The values are test_causal_mask's.
    got = submission.call("causal_mask", (3, 5), {"device": torch.device("meta")}, device="meta").value
    try:
        expect.tensor(got, ref.causal_mask(3, 5), what="causal_mask", axes=("L_q", "L_k"),
                      sizes={"L_q": 3, "L_k": 5}, dtype=torch.bool, device="meta", tol=EXACT)
    except CheckFailed as exc:
        if exc.diagnosis.kind == "device":
            exc.diagnosis.summary = (f"causal_mask(3, 5, device=torch.device('meta')) returned a tensor on "
                                     f"{exc.diagnosis.got}: the device argument was ignored")
            exc.diagnosis.misconception = "causal-device-ignored"
            exc.diagnosis.hint = ("Create every tensor in causal_mask with device=device: "
                                  "torch.ones(L_q, L_k, dtype=torch.bool, device=device), "
                                  "torch.arange(L_k, device=device).")
        raise


@pytest.mark.group("dtypes")
def test_runs_on_meta(submission, seed):
    """works on the inputs' device (checked on meta)"""
    # q, k, v and the mask on meta: a tensor created without device=q.device (a mask, a bias, a
    # scale) then meets them in one operation and torch raises (named "new-tensor-device"), as it
    # would on a GPU. Meta tensors have no values: shape, dtype and device are checked here.
    case = inputs.attention_case(seed, mask="broadcast")
    _, (out, weights) = attend(submission, case, device="meta")
    exp_out, exp_w = ref.scaled_dot_product_attention(case.q, case.k, case.v, case.mask)
    expect.tensors([Expected(out, exp_out, "output", case.axes("L_q", "d_v")),
                    Expected(weights, exp_w, "weights", case.axes("L_q", "L_k"))],
                   sizes=case.sizes, dtype=torch.float32, device="meta")


@pytest.mark.group("causal")
def test_causal_attention_no_future_leakage(submission, seed, device):
    """no leakage from future keys and values"""
    L = 7                                        # distinct from B = 2, d_k = 8 and d_v = 6
    case = inputs.attention_case(seed, batch_axes=("B",), L_q=L, L_k=L, mask=None)
    case.mask = ref.causal_mask(L)
    base_out = check_attention(submission, case, device=device).value[0].to(torch.float64)
    gen = inputs.generator(seed + 1)
    for t in range(L - 1):
        probe = inputs.AttentionCase(case.q, case.k.clone(), case.v.clone(), case.mask, case.sizes, case.batch_axes)
        probe.k[:, t + 1:] = inputs.randn(gen, *probe.k[:, t + 1:].shape) * 100
        probe.v[:, t + 1:] = inputs.randn(gen, *probe.v[:, t + 1:].shape) * 100
        # The first future key aligned with query t at a score of LEAK_SCORE, whatever the seed: a
        # softmax that sees it (a zeroed-then-renormalised one turns the row into 0/0) leaks.
        probe.k[:, t + 1] = inputs.aligned_key(case.q[:, t], LEAK_SCORE)   # (B, d_k)
        _, (out, probe_w) = attend(submission, probe, device=device)
        # The same call shape as the first one: a submission must not be able to make our own
        # arithmetic below fail (that would be reported as a grader error).
        expect.shape(out, base_out.shape, what="output", axes=case.axes("L_q", "d_v"), sizes=case.sizes)
        expect.shape(probe_w, (*base_out.shape[:-1], L), what="weights", axes=case.axes("L_q", "L_k"),
                     sizes=case.sizes)
        change = (out.to(torch.float64)[:, : t + 1] - base_out[:, : t + 1]).abs().max()
        if not float(change) <= 1e-4:   # NaN fails too
            failure = fail("property", f"output of query {t} changed by {float(change):.3g} when only keys/values after "
                           f"position {t} changed: information leaks from the future",
                           details={"position": t},
                           hint="Masked scores must be -inf before the softmax; zeroing or multiplying lets the "
                                "future leak through the softmax's normaliser or the values.",
                           misconception="future-leak")
            raise pictured(failure, probe_w, probe, case)


@pytest.mark.group("values")
def test_large_scores(submission, seed, device):
    """large scores (about 100) do not overflow the softmax"""
    # Every row's largest allowed score is planted at 120, and a hidden key above it in row 0
    # (inputs.large_scores_case): the verdict of an overflowing exp, of a "small enough" fill value or
    # of an ignored mask cannot depend on the seed.
    case = inputs.large_scores_case(seed, scale=LARGE_SCALE).rounded(torch.float32)
    # Scores this large saturate the softmax: every mistake but the overflow gives nearly the same
    # one-hot weights here, so only the overflow is named (the other tests name the rest).
    overflow = lambda which: [v for v in output_variants(case.q, case.k, case.v, case.mask, which=which,  # noqa: E731
                                                         dtype=torch.float32) if v.name == "softmax-overflow"]
    result, (out, weights) = attend(submission, case, device=device)
    exp_out, exp_w = ref.scaled_dot_product_attention(case.q, case.k, case.v, case.mask)
    expect.tensors([Expected(out, exp_out, "output", case.axes("L_q", "d_v"), lambda: overflow(0), LARGE_TOL),
                    Expected(weights, exp_w, "weights", case.axes("L_q", "L_k"), lambda: overflow(1), LARGE_TOL)],
                   sizes=case.sizes, dtype=torch.float32, device=device)


# -------------------------------------------------------------------------------------------------
# Dtypes and memory layout


@pytest.mark.group("dtypes")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16], ids=["float64", "float16", "bfloat16"])
def test_dtype(submission, seed, device, dtype):
    """keeps the inputs' dtype"""
    # Bounded inputs, and the reference computed from them as rounded to ``dtype``: what is left is
    # the learner's arithmetic, well inside the tolerance at every seed (docs/tolerances.md).
    case = inputs.attention_case(seed, mask="full", bound=inputs.DTYPE_BOUND, **DTYPE_SIZES).rounded(dtype)
    check_attention(submission, case, dtype=dtype, device=device)


@pytest.mark.group("properties")
def test_noncontiguous_inputs(submission, seed, device):
    """non-contiguous inputs (reshape, not view)"""
    check_attention(submission, inputs.attention_case(seed, mask="full"), device=device, noncontiguous=True)


# -------------------------------------------------------------------------------------------------
# Properties


@pytest.mark.group("properties")
def test_weight_rows_sum_to_one(submission, seed, device):
    """each query's weights sum to 1"""
    for mask in (None, "full"):
        case = inputs.attention_case(seed, mask=mask)
        _, (_, weights) = attend(submission, case, device=device)
        expect.shape(weights, (*case.q.shape[:-1], case.k.shape[-2]), what="weights",
                     axes=case.axes("L_q", "L_k"), sizes=case.sizes)
        sums = weights.to(torch.float64).sum(-1)
        off = (sums - 1).abs()
        if not float(off.max()) <= 1e-4:   # NaN fails too
            off = torch.nan_to_num(off, nan=float("inf"))                # NaN is the worst row
            idx = [int(i) for i in (off == off.max()).nonzero()[0]]
            failure = fail("property", f"weight rows sum to between {float(sums.min()):.3g} and {float(sums.max()):.3g}, "
                           f"not 1 (worst at {idx})", expected=1.0, got=_json_number(float(sums.flatten()[int(off.argmax())])),
                           hint="Softmax over the keys (dim=-1), and mask before the softmax, not after it.",
                           misconception="weight-rows-not-normalised")
            raise pictured(failure, weights, case, case)


@pytest.mark.group("properties")
def test_inputs_unchanged(submission, seed, device):
    """inputs are not modified in place"""
    case = inputs.attention_case(seed, mask="full")
    q, k, v = case.cast(torch.float32)
    result = submission.call(SDPA, (q, k, v, case.mask), echo_args=True, device=device)
    for name, before, after in zip(("q", "k", "v", "mask"), (q, k, v, case.mask), result.args_after or ()):
        if (not isinstance(after, torch.Tensor) or after.shape != before.shape
                or after.dtype != before.dtype or not torch.equal(after, before)):
            raise fail("side-effect", f"your function modified its input {name} in place",
                       hint="Use out-of-place operations (masked_fill, not masked_fill_; x = x / s, not x /= s).",
                       misconception="inputs-modified")


@pytest.mark.group("properties")
def test_gradients_flow(submission, seed, device):
    """gradients reach q, k and v"""
    case = inputs.attention_case(seed, mask="full", **GRADIENT_SIZES)
    gen = inputs.generator(seed + 7)
    exp_out, exp_w = ref.scaled_dot_product_attention(case.q, case.k, case.v, case.mask)
    g_out, g_w = inputs.randn(gen, *exp_out.shape), inputs.randn(gen, *exp_w.shape)
    result = submission.call(SDPA, (case.q, case.k, case.v), {"mask": case.mask}, device=device,
                             grad_wrt=(0, 1, 2), grad_seeds=(g_out, g_w))
    out, weights = expect.returns(result.value, ("output", "weights"), SDPA)
    # Forward values first (float64: a mistake is named to 1e-9): wrong values explain wrong gradients.
    expect.tensors([
        Expected(out, exp_out, "output", case.axes("L_q", "d_v"),
                 lambda: output_variants(case.q, case.k, case.v, case.mask, which=0, dtype=torch.float64)),
        Expected(weights, exp_w, "weights", case.axes("L_q", "L_k"),
                 lambda: weight_variants(case, exp_out, torch.float64)),
    ], sizes=case.sizes, dtype=torch.float64, device=device)
    q, k, v = (t.clone().requires_grad_() for t in (case.q, case.k, case.v))
    out, w = ref.scaled_dot_product_attention(q, k, v, case.mask)
    expected = torch.autograd.grad((out * g_out).sum() + (w * g_w).sum(), (q, k, v))
    expect.gradients(result, expected, names=("q", "k", "v"))


# -------------------------------------------------------------------------------------------------
# CUDA (worth no points: not every machine has a GPU)


@pytest.mark.group("cuda")
def test_cuda(submission, seed, cuda):
    """runs on the GPU"""
    check_attention(submission, inputs.attention_case(seed, mask="broadcast"), device=cuda)

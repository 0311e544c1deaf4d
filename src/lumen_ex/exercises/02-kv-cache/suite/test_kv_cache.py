"""Hidden suite for exercise 2: decode_step, one decoding step with a KV cache.

Every test builds seeded float64 inputs on the CPU, computes the reference from them before the
call, sends the inputs (cast to the dtype under test) to the learner's code through ``submission``,
and checks what came back shape first. The docstring's first line is what the learner sees as the
test's name.

Axis names in feedback: B batch, H query heads (n_heads), H_kv key/value heads (n_kv_heads), T
cached tokens (T+1 after the step), d_head the width of one head, d_model the model width.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from contextlib import contextmanager

import pytest
import torch

from lumen_ex.author import CheckFailed, Expected, LearnerError, WorkerFailure, exercise, expect, fail, inputs, meta

ref = exercise(__file__).reference
mistakes = exercise(__file__).mistakes
K_CACHE, V_CACHE, Y_T, step_variants = mistakes.K_CACHE, mistakes.V_CACHE, mistakes.Y_T, mistakes.step_variants

FN = "decode_step"
PARAMS = ("x_t", "k_cache", "v_cache", "w_q", "w_k", "w_v", "w_o", "n_heads")
OUTPUTS = ("y_t", "k_cache", "v_cache")
Y_AXES = ("B", "d_model")
CACHE_AXES = ("B", "H_kv", "T+1", "d_head")

# Head layouts, on top of inputs.DECODE_SIZES (B=3, n_heads=6, n_kv_heads=2, T=7, d_head=5, d_model=11).
GQA = {}                            # grouped-query: 3 query heads per KV head
MHA = {"n_kv_heads": 6}             # multi-head: one KV head per query head
MQA = {"n_kv_heads": 1}             # multi-query: one KV head for all
EMPTY = {"T": 0}                    # the first token: nothing cached yet
REALISTIC = {"B": 3, "n_heads": 8, "n_kv_heads": 2, "T": 100, "d_head": 16, "d_model": 96}
# For the dtype tests (float16 and bfloat16 are matched at 1e-2 and 2e-2): few keys and a wide head keep
# the known mistakes apart, 1/sqrt(d_model) = 1/sqrt(29) far from 1/sqrt(d_head) = 1/sqrt(12) and from
# 1/d_head (tests/e2e/test_variants.py); all sizes stay distinct (T+1 = 5, H*d_head = 72, H_kv*d_head = 24).
DTYPE_SIZES = {"T": 4, "d_head": 12, "d_model": 29}

# The cost test: small widths, the work of one step counted at T and at 4T. A linear step does
# about 4x the work (a little less: some work does not grow with T); one that rebuilds a T x T score
# matrix does about 16x.
COST_SIZES = {"B": 1, "n_heads": 4, "n_kv_heads": 2, "d_head": 3, "d_model": 5}
COST_T = 128
MAX_GROWTH = 5.0
# The work counter runs in the learner's process (src/lumen_ex/sandbox/inside/work_counter.py), which can patch it: it is a
# hint that can only fail a step. The proof is the grader's own clock: one step at a long cache,
# timed from outside the worker. A linear step takes milliseconds there, even on a loaded machine;
# an O(T^2) one cannot allocate its T x T scores (B * H * T^2 floats: 17 GB) or finish its T^2 / 2
# prefix products (3e10 multiply-adds) within LONG_SECONDS, half the exercise's call limit.
LONG_T = 16384
LONG_SIZES = {"B": 2, "n_heads": 8, "n_kv_heads": 2, "d_head": 16, "d_model": 24}
LONG_SECONDS = 5.0


def _cat_axis(exc) -> bool:
    """torch.cat refused the pieces because they differ on the axis the learner did not concatenate
    on, and that axis is not the time axis (2): the cache was grown along another axis."""
    m = re.search(r"Sizes of tensors must match except in dimension (-?\d+)", exc.message)
    return m is not None and int(m.group(1)) not in (2, -2)


def _projection_transposed(exc) -> bool:
    """A matmul size mismatch on a line that projects with F.linear(x, W) (which computes x @ W.T)
    or with a transposed weight: the weights here are (in, out) and sit on the right, x @ W."""
    if "cannot be multiplied" not in exc.message and "must match the size" not in exc.message:
        return False
    line = expect.failing_line(exc)
    return bool(re.search(r"\blinear\(|\bw_[qkvo]\w*\.(T|mT|t\(\))|\bw_[qkvo]\w*\.transpose\(", line))


# Exceptions whose cause is recognisable: (misconception, sentence, predicate).
NAMED_EXCEPTIONS = [
    ("projection-transposed", "the weights are (d_model, n_heads * d_head), laid out to sit on the right: project "
     "with x_t @ w_q. F.linear(x, W) computes x @ W.T, for PyTorch's (out, in) nn.Linear layout, and W.T "
     "transposes them the wrong way", _projection_transposed),
    ("wrong-concat-axis", "torch.cat grows your cache along another axis than time: the caches are "
     "(B, n_kv_heads, T, d_head), so append the new (B, n_kv_heads, 1, d_head) entry with "
     "torch.cat([k_cache, k_new], dim=2)", _cat_axis),
]


def axis_sizes(s: dict) -> dict[str, int]:
    """Every axis name with its size, for naming the axes of a wrong shape (on a tie, the first name wins)."""
    named = {"B": s["B"], "H": s["n_heads"], "H_kv": s["n_kv_heads"], "T+1": s["T"] + 1, "T": s["T"],
             "d_head": s["d_head"], "d_model": s["d_model"], "H*d_head": s["n_heads"] * s["d_head"],
             "H_kv*d_head": s["n_kv_heads"] * s["d_head"]}
    out: dict[str, int] = {}
    for name, size in named.items():
        if size not in out.values():
            out[name] = size
    return out


@contextmanager
def shape_hints(s: dict):
    """Replace the generic hint of a shape failure by the mistake its shape points to."""
    try:
        yield
    except CheckFailed as exc:
        diag = exc.diagnosis
        if diag.kind == "shape" and diag.misconception != "outputs-swapped":
            named = _shape_hint(diag.summary.split(":")[0], list(diag.got or []), s)
            if named:
                diag.misconception, diag.hint = named
        raise


def _shape_hint(what: str, got: list[int], s: dict) -> tuple[str, str] | None:
    """The mistake a wrong shape points to: (misconception, hint)."""
    B, H, H_kv, T, d_head, D = (s[k] for k in ("B", "n_heads", "n_kv_heads", "T", "d_head", "d_model"))
    if what == "y_t":
        if got == [B, H * d_head]:
            return ("no-output-projection",
                    "y_t is still (B, n_heads * d_head): after merging the heads, apply the output projection w_o.")
        if got == [B, 1, D]:
            return "token-axis-kept", "y_t keeps a size-1 token axis: return (B, d_model), e.g. y[:, 0] or y.squeeze(1)."
    elif len(got) == 4:
        if got[2] == T:
            return ("cache-not-grown",
                    f"{what} has T entries, as it came in: return the grown cache with the new token appended, "
                    f"torch.cat([{what}, new], dim=2), T + 1 entries long.")
        if got[1] == H and H != H_kv:
            return ("cache-expanded",
                    f"{what} holds n_heads heads: store n_kv_heads heads and expand them only for the "
                    "attention (a small cache is the point of grouped-query attention).")
    return None


def decode(submission, case, *, dtype=torch.float32, device="cpu", **options):
    """Call the learner's decode_step on ``case``: the CallResult and its (y_t, k_cache, v_cache)."""
    with expect.exceptions_named(NAMED_EXCEPTIONS):
        result = submission.call(FN, tuple(case.args(dtype)), device=device, **options)
    return result, expect.returns(result.value, OUTPUTS, FN)


def expected_step(case):
    """The reference (y_t, k_cache, v_cache) in float64, and the variants of each, for ``case``."""
    args = (*case.tensors(), case.n_heads)
    return ref.decode_step(*args), (lambda which: lambda: step_variants(*args, which=which))


def check_step(submission, case, *, dtype=torch.float32, device="cpu", **options):
    """The learner's (y_t, k_cache, v_cache) must match the float64 reference on ``case``."""
    expected, variants = expected_step(case)          # from the inputs, before the call
    result, got = decode(submission, case, dtype=dtype, device=device, **options)
    axes = (Y_AXES, CACHE_AXES, CACHE_AXES)
    with shape_hints(case.sizes):
        expect.tensors([Expected(g, e, name, ax, variants(i))
                        for i, (g, e, name, ax) in enumerate(zip(got, expected, OUTPUTS, axes))],
                       sizes=axis_sizes(case.sizes), dtype=dtype, device=device)
    return result


# -------------------------------------------------------------------------------------------------
# The contract


@pytest.mark.group("contract")
def test_signature(submission):
    """decode_step has the stub's parameters"""
    expect.signature(submission, FN, PARAMS)


@pytest.mark.group("contract")
def test_returns_three_tensors(submission, seed, device):
    """returns (y_t, k_cache, v_cache)"""
    decode(submission, inputs.decode_case(seed), device=device)


# -------------------------------------------------------------------------------------------------
# Shapes


@pytest.mark.group("shapes")
@pytest.mark.parametrize("sizes", [GQA, EMPTY], ids=["T=7", "T=0"])
def test_shapes(submission, seed, device, sizes):
    """y_t (B, d_model), caches grow to T+1"""
    case = inputs.decode_case(seed, **sizes)
    (exp_y, exp_k, exp_v), _ = expected_step(case)
    _, (y_t, k_cache, v_cache) = decode(submission, case, device=device)
    names = axis_sizes(case.sizes)
    with shape_hints(case.sizes):
        expect.shapes([Expected(y_t, exp_y, "y_t", Y_AXES), Expected(k_cache, exp_k, "k_cache", CACHE_AXES),
                       Expected(v_cache, exp_v, "v_cache", CACHE_AXES)], sizes=names)


# -------------------------------------------------------------------------------------------------
# Values


@pytest.mark.group("values")
@pytest.mark.parametrize("sizes", [GQA, MHA, MQA], ids=["gqa", "mha", "mqa"])
def test_values(submission, seed, device, sizes):
    """y_t and caches match the reference"""
    check_step(submission, inputs.decode_case(seed, **sizes), device=device)


@pytest.mark.group("values")
def test_empty_cache(submission, seed, device):
    """an empty cache (T = 0, the first token)"""
    check_step(submission, inputs.decode_case(seed, **EMPTY), device=device)


@pytest.mark.group("values")
def test_realistic_size(submission, seed, device):
    """realistic sizes (T = 100, d_head = 16)"""
    check_step(submission, inputs.decode_case(seed, **REALISTIC), device=device)


@pytest.mark.group("values")
def test_noncontiguous_inputs(submission, seed, device):
    """non-contiguous inputs and caches"""
    check_step(submission, inputs.decode_case(seed), device=device, noncontiguous=True)


# -------------------------------------------------------------------------------------------------
# The cache itself


def _cache_part(submission, case, part, label: str, device: str):
    """Check one part of the time axis (an index or a slice) of both returned caches."""
    (_, exp_k, exp_v), variants = expected_step(case)
    _, (_, k_cache, v_cache) = decode(submission, case, device=device)
    names = axis_sizes(case.sizes)
    with shape_hints(case.sizes):
        expect.shape(k_cache, exp_k.shape, what="k_cache", axes=CACHE_AXES, sizes=names)
        expect.shape(v_cache, exp_v.shape, what="v_cache", axes=CACHE_AXES, sizes=names)
    axes = ("B", "H_kv", "d_head") if isinstance(part, int) else ("B", "H_kv", "T", "d_head")

    def take(t):
        """t[:, :, part], keeping what the worker said about t (its device)."""
        out = t[:, :, part]
        out.lumen_meta = meta(t)
        return out

    def sliced(which):
        return lambda: [dataclasses.replace(v, value=v.value[:, :, part]) for v in variants(which)()]

    expect.tensors([
        Expected(take(k_cache), exp_k[:, :, part], f"k_cache[:, :, {label}]", axes, sliced(K_CACHE)),
        Expected(take(v_cache), exp_v[:, :, part], f"v_cache[:, :, {label}]", axes, sliced(V_CACHE)),
    ], sizes=names, dtype=torch.float32, device=device)


@pytest.mark.group("cache")
def test_new_entry_at_end(submission, seed, device):
    """the new key and value go at the end"""
    case = inputs.decode_case(seed)
    try:
        _cache_part(submission, case, -1, "-1", device)
    except CheckFailed as exc:
        if exc.diagnosis.kind == "values" and not exc.diagnosis.misconception:
            exc.diagnosis.hint = ("The last entry of each cache must be the new token's key (x_t @ w_k) or value "
                                  "(x_t @ w_v), split into heads as (B, n_kv_heads, d_head).")
        raise


@pytest.mark.group("cache")
def test_old_entries_kept(submission, seed, device):
    """earlier entries are kept, in order"""
    case = inputs.decode_case(seed)
    try:
        _cache_part(submission, case, slice(0, case.sizes["T"]), ":T", device)
    except CheckFailed as exc:
        if exc.diagnosis.kind == "values" and not exc.diagnosis.misconception:
            exc.diagnosis.hint = ("The first T entries of the returned caches must be the caches you were given, "
                                  "unchanged and in the same order: only append to them.")
        raise


@pytest.mark.group("cache")
def test_caller_caches_unchanged(submission, seed, device):
    """the caller's caches are not modified"""
    case = inputs.decode_case(seed)
    sent = case.args(torch.float32)
    with expect.exceptions_named(NAMED_EXCEPTIONS):
        result = submission.call(FN, tuple(sent), device=device, echo_args=True)
    expect.returns(result.value, OUTPUTS, FN)
    after = result.args_after
    if not isinstance(after, tuple) or len(after) != len(sent):
        raise fail("protocol", "the worker did not send the arguments back after the call")
    hint = ("Build new caches, torch.cat([k_cache, k_new], dim=2), and never write into the ones you were "
            "given (no slice assignment, .data =, set_ or other in-place ops): the caller may still use them.")
    for name, before, now in zip(PARAMS, sent, after):
        if not isinstance(before, torch.Tensor):
            continue
        if not isinstance(now, torch.Tensor) or now.shape != before.shape:
            raise fail("side-effect", f"decode_step changed the caller's {name} in place: it was "
                       f"{tuple(before.shape)} and is now {tuple(getattr(now, 'shape', ()))}",
                       expected=list(before.shape), got=list(getattr(now, "shape", [])), hint=hint,
                       misconception="caller-cache-mutated")
        if now.dtype != before.dtype:
            raise fail("side-effect", f"decode_step changed the dtype of the caller's {name} in place, from "
                       f"{before.dtype} to {now.dtype}", hint=hint,
                       misconception="caller-cache-mutated")
        if not torch.equal(now, before):
            changed = int((now != before).sum())
            raise fail("side-effect", f"decode_step wrote into the caller's {name}: {changed} of "
                       f"{before.numel()} values changed", details={"changed": changed}, hint=hint,
                       misconception="caller-cache-mutated")


# -------------------------------------------------------------------------------------------------
# Decoding a whole sequence


@pytest.mark.group("decode")
def test_decode_matches_full_attention(submission, seed, device):
    """token by token = full causal attention"""
    L = 6
    dtype = torch.float32
    x, (w_q, w_k, w_v, w_o), s = inputs.sequence(seed, L)        # x (B, L, d_model)
    B, n_heads, n_kv, d_head = s["B"], s["n_heads"], s["n_kv_heads"], s["d_head"]
    full = ref.causal_self_attention(x, w_q, w_k, w_v, w_o, n_heads)   # (B, L, d_model)
    k_all = ref.split_heads(x @ w_k, n_kv)                         # (B, n_kv_heads, L, d_head)
    v_all = ref.split_heads(x @ w_v, n_kv)                         # (B, n_kv_heads, L, d_head)
    weights = tuple(w.to(dtype) for w in (w_q, w_k, w_v, w_o))
    k_cache = torch.zeros(B, n_kv, 0, d_head, dtype=dtype)         # (B, n_kv_heads, 0, d_head)
    v_cache = torch.zeros(B, n_kv, 0, d_head, dtype=dtype)
    for t in range(L):
        step_args = (x[:, t], k_all[:, :, :t], v_all[:, :, :t], w_q, w_k, w_v, w_o, n_heads)
        sizes = {**s, "T": t}
        # The learner's own caches from the previous step go back in (plain tensors, as returned).
        with expect.exceptions_named(NAMED_EXCEPTIONS):
            result = submission.call(FN, (x[:, t].to(dtype), k_cache, v_cache, *weights, n_heads), device=device)
        y_t, k_cache, v_cache = expect.returns(result.value, OUTPUTS, FN)
        try:
            with shape_hints(sizes):
                expect.tensors([
                    Expected(y_t, full[:, t], "y_t", Y_AXES,
                             lambda: step_variants(*step_args, which=Y_T)),  # noqa: B023 (called in this iteration)
                    Expected(k_cache, k_all[:, :, : t + 1], "k_cache", CACHE_AXES,
                             lambda: step_variants(*step_args, which=K_CACHE)),  # noqa: B023
                    Expected(v_cache, v_all[:, :, : t + 1], "v_cache", CACHE_AXES,
                             lambda: step_variants(*step_args, which=V_CACHE)),  # noqa: B023
                ], sizes=axis_sizes(sizes), dtype=dtype, device=device)
        except CheckFailed as exc:
            diag = exc.diagnosis
            matched = ("the first step" if t == 0 else "step 1 matches but step 2" if t == 1
                       else f"steps 1-{t} match but step {t + 1}")
            diag.summary = (f"decoding {L} tokens from an empty cache, {matched} ({t} token"
                            f"{'s' if t != 1 else ''} cached) differs: {diag.summary}")
            diag.details["step"] = t
            raise


# -------------------------------------------------------------------------------------------------
# Dtypes


@pytest.mark.group("dtypes")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16], ids=["float64", "float16", "bfloat16"])
def test_dtype(submission, seed, device, dtype):
    """keeps the inputs' dtype"""
    # Bounded inputs, and the reference computed from them as rounded to ``dtype``: what is left is
    # the learner's arithmetic, well inside the tolerance at every seed (docs/tolerances.md).
    case = inputs.decode_case(seed, bound=inputs.DTYPE_BOUND, **DTYPE_SIZES).rounded(dtype)
    check_step(submission, case, dtype=dtype, device=device)


@pytest.mark.group("dtypes")
def test_runs_on_meta(submission, seed):
    """works on the inputs' device (checked on meta)"""
    # Every input on meta (shape, dtype and device, no data; src/lumen_ex/sandbox/inside/wire.py carries them): a tensor
    # created without device= (a mask, a buffer for the caches) meets them in one operation and
    # torch raises (named "new-tensor-device"), as it would on a GPU. Shapes, dtypes and devices are
    # checked; meta tensors have no values.
    case = inputs.decode_case(seed)
    expected, _ = expected_step(case)
    _, got = decode(submission, case, device="meta")
    with shape_hints(case.sizes):
        expect.tensors([Expected(g, e, name, ax) for g, e, name, ax in
                        zip(got, expected, OUTPUTS, (Y_AXES, CACHE_AXES, CACHE_AXES))],
                       sizes=axis_sizes(case.sizes), dtype=torch.float32, device="meta")


# -------------------------------------------------------------------------------------------------
# Cost


@pytest.mark.group("cost")
def test_cost_linear_in_t(submission, seed, device):
    """each step's cost is linear in T"""
    counts = []
    for i, T in enumerate((COST_T, 4 * COST_T)):
        case = inputs.decode_case(seed, T=T, **COST_SIZES)
        if i == 0:   # the cost of a correct step: a step that skips the work is not cheap, it is wrong
            result = check_step(submission, case, device=device, count_ops=True)
        else:
            result, _ = decode(submission, case, device=device, count_ops=True)
        if not isinstance(result.ops, dict) or not isinstance(result.ops.get("total_elements"), int):
            raise fail("protocol", "the worker did not report how much work the step did")
        counts.append(result.ops)
    T, last = 4 * COST_T, counts[-1]
    largest, shape = int(last.get("largest", 0)), list(last.get("largest_shape") or [])
    op = str(last.get("largest_op", "?"))[:60]
    hint = ("One decode step is one query against T + 1 keys: scores of shape (B, n_heads, 1, T + 1). Do not "
            "rebuild a (T + 1) x (T + 1) score matrix or recompute the earlier tokens: that is what the cache saves.")
    if largest >= T * T / 2:
        square = sum(1 for n in shape if isinstance(n, int) and n >= T) >= 2
        what = "a T x T matrix" if square else "an intermediate of O(T^2) elements"
        raise fail("property", f"your step builds {what} (largest intermediate {largest} elements, shape "
                   f"{tuple(shape)}, from {op}) at T = {T}", expected=f"fewer than {T * T // 2} elements",
                   got=largest, details={"T": T, "largest_shape": shape, "largest_op": op}, hint=hint,
                   misconception="quadratic-cost")
    totals = [int(c["total_elements"]) for c in counts]
    growth = totals[1] / max(totals[0], 1)
    if growth > MAX_GROWTH:
        raise fail("property", f"your step's work grows {growth:.1f}x from T = {COST_T} to 4T = {4 * COST_T} "
                   f"({totals[0]} to {totals[1]} elements produced): it recomputes attention over all tokens, "
                   "O(T^2) per step", expected=f"at most {MAX_GROWTH}x (linear in T)", got=round(growth, 2),
                   details={"T": [COST_T, 4 * COST_T], "total_elements": totals}, hint=hint,
                   misconception="quadratic-cost")
    long_step(submission, seed, device, hint)


@functools.lru_cache(maxsize=4)
def long_case(seed: int):
    """The cost test's long case (T = LONG_T) and its float64 reference (y_t, k_cache, v_cache).

    Kept for the next call with the same seed (a function of it alone): a grading process runs the
    suite again for every file of a class with one seed (src/lumen_ex/harness/kept_session.py), and
    drawing these inputs and the reference step on them is most of this test's own work. Nothing
    writes into them: the learner gets copies through the sandbox's pipe, and the suite only reads them."""
    case = inputs.decode_case(seed, T=LONG_T, **LONG_SIZES)
    expected, _ = expected_step(case)
    return case, expected


def long_step(submission, seed, device, hint: str) -> None:
    """The proof of the cost test, from the trusted side: one step at T = LONG_T, its values checked,
    within LONG_SECONDS on the grader's clock. A step too slow, or one that runs out of memory, fails."""
    case, expected = long_case(seed)
    where = f"at T = {LONG_T} (timed by the grader, outside your code)"
    details = {"T": LONG_T, "seconds": LONG_SECONDS}
    try:
        _, got = decode(submission, case, device=device, timeout=LONG_SECONDS)
        # Values too (a fast wrong answer proves nothing); no mistakes are named at this length.
        with shape_hints(case.sizes):
            expect.tensors([Expected(g, e, name, ax) for g, e, name, ax
                            in zip(got, expected, OUTPUTS, (Y_AXES, CACHE_AXES, CACHE_AXES))],
                           sizes=axis_sizes(case.sizes), dtype=torch.float32, device=device)
    except WorkerFailure as exc:
        if exc.kind == "protocol":
            raise
        what = (f"one step did not finish within {LONG_SECONDS:g} s" if exc.kind == "timeout"
                else "one step made the worker die (killed for using too much memory?)")
        raise fail("property", f"{where} {what}: a linear step takes milliseconds there, so yours grows "
                   "like T^2", expected=f"under {LONG_SECONDS:g} s", got=exc.kind, details=details, hint=hint,
                   misconception="quadratic-cost") from None
    except LearnerError as exc:
        text = f"{exc.type}: {exc.message}"
        if exc.type == "MemoryError" or re.search(r"allocate|out of memory", text, re.IGNORECASE):
            raise fail("property", f"{where} your step ran out of memory ({text[:160]}): it builds an "
                       "intermediate of O(T^2) elements", details=details, hint=hint,
                       misconception="quadratic-cost") from None
        raise


# -------------------------------------------------------------------------------------------------
# CUDA (worth no points: not every machine has a GPU)


@pytest.mark.group("cuda")
def test_cuda(submission, seed, cuda):
    """runs on the GPU"""
    check_step(submission, inputs.decode_case(seed), device=cuda)

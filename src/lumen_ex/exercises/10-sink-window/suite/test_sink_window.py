"""Hidden suite for exercise 10: streaming_decode_step, one decoding step over a StreamingLLM cache.

Every test builds seeded float64 inputs on the CPU (src/lumen_ex/exercises/10-sink-window/suite/cases.py:
a fixed phase, n_seen, n_sink and window, with seeded values in the occupied slots and zeros in the
empty ones), computes the reference from them before the call, sends them (cast to the dtype under
test; the three ints as ints) to the learner's code through ``submission``, and checks what came back
shape first, then dtype and device, then values: the caches before out_t (the write comes first in
a step, and a wrong slot explains a wrong out_t). The returned caches are graded on their occupied
slots only, 0..min(n_seen, C - 1): what the others hold is the learner's choice. The docstring's
first line is what the learner sees as the test's name.

Axis names in feedback: B batch, H query heads, H_kv key/value heads, C = n_sink + window the cache's
slots, n_occ the slots occupied after the step, d the width of one head; in the decoding probe, L_q
the token decoded at each step and L_k the tokens it may attend to.
"""

from __future__ import annotations

import re
from contextlib import contextmanager

import pytest
import torch

from lumen_ex.author import CheckFailed, Expected, exercise, expect, fail, inputs, meta, pictures, sibling

ref = exercise(__file__).reference
mistakes = exercise(__file__).mistakes
cases = sibling(__file__, "suite/cases")
OUT_T, K_CACHE, V_CACHE = mistakes.OUT_T, mistakes.K_CACHE, mistakes.V_CACHE

FN = "streaming_decode_step"
PARAMS = ("q_t", "k_t", "v_t", "k_cache", "v_cache", "n_seen", "n_sink", "window")
OUTPUTS = ("out_t", "k_cache", "v_cache")
OUT_AXES = ("B", "H", "d")
CACHE_AXES = ("B", "H_kv", "C", "d")
OCC_AXES = ("B", "H_kv", "n_occ", "d")

# The phases, on top of cases.STEP_SIZES (B=3, H=6, H_kv=2, d=4) and n_sink=2, window=5 (C=7).
FILLING = {"n_seen": 4}                       # slots 0..4 occupied after the step, 5 and 6 empty
LAST_FREE_SLOT = {"n_seen": 6}                # the new token fills slot 6: the cache is exactly full
FIRST_EVICTION = {"n_seen": 7}                # full before the step: token 7 evicts token 2 from slot 2
LONG_AFTER = {"n_seen": 25}                   # the ring wrapped four times: token 25 evicts token 20 from slot 5
NO_SINKS = {"n_seen": 30, "n_sink": 0, "window": 7, "H_kv": 6}          # plain sliding window, multi-head
WINDOW_ONE = {"n_seen": 11, "n_sink": 4, "window": 1, "H_kv": 1}        # C=5: sinks and the new token only
# For the dtype tests (float16 and bfloat16 are matched at 1e-2 and 2e-2): a wide head keeps the known
# mistakes apart; every axis stays distinct (B=3, H=6, H_kv=2, C=7, d=12).
DTYPE_SIZES = {**FIRST_EVICTION, "d": 12}


def _slot_past_capacity(exc) -> bool:
    """An index past the cache's slots on the slot axis: the new token written at slot n_seen >= C."""
    m = re.search(r"index (\d+) is out of bounds for dimension (-?\d+) with size (\d+)", exc.message)
    return m is not None and int(m.group(2)) in (2, -2) and int(m.group(1)) >= int(m.group(3))


NAMED_EXCEPTIONS = [
    ("slot-past-capacity", "the cache has C = n_sink + window slots, 0..C-1: slot n_seen exists only while the "
     "cache fills (n_seen < C). Once it is full the new token overwrites the oldest window slot, "
     "n_sink + (n_seen - n_sink) % window", _slot_past_capacity),
]


def decode(submission, args, *, device="cpu", **options):
    """Call the learner's streaming_decode_step: the CallResult and its (out_t, k_cache, v_cache)."""
    with expect.exceptions_named(NAMED_EXCEPTIONS):
        result = submission.call(FN, tuple(args), device=device, **options)
    return result, expect.returns(result.value, OUTPUTS, FN)


def _shape_hint(what: str, got: list[int], case) -> str | None:
    """What a wrong shape points to."""
    B, H, d = case.sizes["B"], case.sizes["H"], case.sizes["d"]
    if what == "out_t" and got == [B, H, 1, d]:
        return "out_t keeps the size-1 query axis: return (B, H, d), e.g. out[:, :, 0] or out.squeeze(2)."
    if what in ("k_cache", "v_cache") and len(got) == 4 and got[2] != case.C:
        return (f"{what} keeps its capacity, C = n_sink + window = {case.C} slots, at every step: store the new "
                "token in its slot of a copy (k_cache.clone(), then k_cache[:, :, slot] = k_t) instead of "
                "appending to the cache or cutting it to the occupied slots.")
    return None


@contextmanager
def diagnosed(case, got=None):
    """Refine a failed check: the hint a wrong shape points to; for a wrong cache, the picture of the
    slot each token lives in (``got``: the learner's (out_t, k_cache, v_cache))."""
    try:
        yield
    except CheckFailed as exc:
        diag = exc.diagnosis
        what = re.match(r"[a-z_]*", diag.summary).group(0)
        if diag.kind == "shape" and diag.misconception != "outputs-swapped":
            hint = _shape_hint(what, list(diag.got or []), case)
            if hint:
                diag.hint = hint
        elif diag.kind in ("values", "nonfinite") and what in ("k_cache", "v_cache") and got is not None:
            which = K_CACHE if what == "k_cache" else V_CACHE
            slot_picture(diag, got[which], case, which)
        diag.details.setdefault("phase", {"n_seen": case.n_seen, "n_sink": case.n_sink, "window": case.window})
        raise


def slot_picture(diag, got_cache: torch.Tensor, case, which: int) -> None:
    """Draw the slot each token lives in after the step, expected and yours: rows = tokens 0..n_seen,
    columns = the C slots. Yours: the token whose key (value) each of your slots holds, found by
    comparing it with every token the step knows (the caches' tokens and the new one)."""
    name = "k_cache" if which == K_CACHE else "v_cache"
    given = case.k_cache if which == K_CACHE else case.v_cache                     # (B, H_kv, C, d)
    new = case.k_t if which == K_CACHE else case.v_t                               # (B, H_kv, d)
    before = cases.slot_tokens(case.n_seen, case.n_sink, case.window)
    contents = {t: given[:, :, j] for j, t in enumerate(before) if t is not None}
    contents[case.n_seen] = new
    rows, C = case.n_seen + 1, case.C
    expected = torch.zeros(rows, C, dtype=torch.bool)                              # (tokens, slots)
    for j, t in enumerate(cases.slot_tokens(case.n_seen + 1, case.n_sink, case.window)):
        if t is not None:
            expected[t, j] = True
    tol = expect.TOLERANCES.get(got_cache.dtype, expect.TOLERANCES[torch.float32])
    g = got_cache.detach().to(torch.float64)
    yours = torch.zeros(rows, C, dtype=torch.bool)
    for j in range(min(C, g.shape[2])):
        for t, value in contents.items():
            if expect.separation(g[:, :, j], value, tol) <= 1.0:
                yours[t, j] = True
    pictures.attach(diag, yours, expected, what=f"{name}, the token each slot holds", axes=("token", "slot"),
                    rows="tokens", cols="slots", on="held")


def occupied(t: torch.Tensor, n_occ: int) -> torch.Tensor:
    """t[:, :, :n_occ], keeping what the worker said about t (its device)."""
    out = t[:, :, :n_occ]
    out.lumen_meta = meta(t)
    return out


def cache_items(k, v, exp_k, exp_v, variants_of, n: int) -> list[Expected]:
    """The caches' occupied slots 0..n-1 (yours, the reference's), as checked items."""
    return [Expected(occupied(k, n), exp_k[:, :, :n], f"k_cache[:, :, :{n}]", OCC_AXES, variants_of(K_CACHE)),
            Expected(occupied(v, n), exp_v[:, :, :n], f"v_cache[:, :, :{n}]", OCC_AXES, variants_of(V_CACHE))]


def check_outputs(got, expected, variants_of, case, *, dtype, device) -> None:
    """The staged checks of (out_t, k_cache, v_cache): every shape, then dtypes and devices, then the
    caches' occupied slots, then out_t. ``variants_of(which)`` gives the variants of one output."""
    out, k, v = got
    exp_out, exp_k, exp_v = expected
    names = case.axis_sizes()
    with diagnosed(case, got):
        expect.shapes([Expected(out, exp_out, "out_t", OUT_AXES), Expected(k, exp_k, "k_cache", CACHE_AXES),
                       Expected(v, exp_v, "v_cache", CACHE_AXES)], sizes=names)
        expect.tensors([*cache_items(k, v, exp_k, exp_v, variants_of, case.n_occ),
                        Expected(out, exp_out, "out_t", OUT_AXES, variants_of(OUT_T))], sizes=names, dtype=dtype,
                       device=device)


def expected_step(case):
    """The reference (out_t, k_cache, v_cache) in float64, and the variants of each, for ``case``."""
    return (ref.streaming_decode_step(*case.fresh()),
            lambda which: lambda: mistakes.step_variants(*case.fresh(), which=which))


def check_step(submission, case, *, dtype=torch.float32, device="cpu", **options):
    """The learner's (out_t, k_cache, v_cache) must match the float64 reference on ``case``."""
    expected, variants_of = expected_step(case)            # from the inputs, before the call
    result, got = decode(submission, case.args(dtype), device=device, **options)
    check_outputs(got, expected, variants_of, case, dtype=dtype, device=device)
    return result


def phase(seed: int, sizes: dict, **extra) -> "cases.StepCase":
    return cases.step_case(seed, **{**sizes, **extra})


# -------------------------------------------------------------------------------------------------
# The contract


@pytest.mark.group("contract")
def test_signature(submission):
    """streaming_decode_step has the stub's parameters"""
    expect.signature(submission, FN, PARAMS)


@pytest.mark.group("contract")
def test_returns_three_tensors(submission, seed, device):
    """returns (out_t, k_cache, v_cache)"""
    decode(submission, phase(seed, FILLING).args(torch.float32), device=device)


# -------------------------------------------------------------------------------------------------
# Shapes


@pytest.mark.group("shapes")
def test_shapes(submission, seed, device):
    """out_t (B, H, d), caches keep their C slots"""
    case = phase(seed, FILLING)
    (exp_out, exp_k, exp_v), _ = expected_step(case)
    _, (out, k, v) = decode(submission, case.args(torch.float32), device=device)
    with diagnosed(case):
        expect.shapes([Expected(out, exp_out, "out_t", OUT_AXES), Expected(k, exp_k, "k_cache", CACHE_AXES),
                       Expected(v, exp_v, "v_cache", CACHE_AXES)], sizes=case.axis_sizes())


# -------------------------------------------------------------------------------------------------
# Which tokens each step attends to (first among the value tests: its picture explains the most)


@pytest.mark.group("decode")
def test_attends_sinks_and_window(submission, seed, device):
    """each token attends to exactly the sinks and the last window tokens"""
    # Zero queries give every attended key the same weight, and token s's value is the one-hot e_s, so
    # out_t[..., s] is the weight the query of step t puts on token s: the (L_q, L_k) picture of who
    # attends to whom, read off the outputs alone.
    s = cases.STREAM
    n_sink, window, L = s["n_sink"], s["window"], s["L"]
    q, k, v = cases.probe(seed)                                                 # d = L + 1
    B, H, H_kv, d = q.shape[0], q.shape[1], k.shape[1], q.shape[3]
    C = n_sink + window
    expected = torch.zeros(B, H, L, L, dtype=torch.float64)                     # (B, H, L_q, L_k)
    for t in range(L):
        seen = ref.visible_tokens(t, n_sink, window)
        expected[:, :, t, seen] = 1.0 / len(seen)
    dtype = torch.float32
    k_cache = torch.zeros(B, H_kv, C, d, dtype=dtype)
    v_cache = torch.zeros_like(k_cache)
    ref_k, ref_v = torch.zeros(B, H_kv, C, d, dtype=torch.float64), torch.zeros(B, H_kv, C, d, dtype=torch.float64)
    names = {"B": B, "H": H, "H_kv": H_kv, "C": C, "d": d, "L": L}
    outs = []
    for t in range(L):
        case = cases.StepCase(q[:, :, t], k[:, :, t], v[:, :, t], ref_k, ref_v, t, n_sink, window,
                              {"B": B, "H": H, "H_kv": H_kv, "d": d})
        (_, ref_k, ref_v), variants_of = expected_step(case)
        args = [q[:, :, t].to(dtype), k[:, :, t].to(dtype), v[:, :, t].to(dtype), k_cache, v_cache, t, n_sink, window]
        _, (out, k_cache, v_cache) = decode(submission, args, device=device)
        try:
            expect.shape(out, (B, H, d), what="out_t", axes=OUT_AXES, sizes=names)
            expect.shape(k_cache, (B, H_kv, C, d), what="k_cache", axes=CACHE_AXES, sizes=names)
            expect.shape(v_cache, (B, H_kv, C, d), what="v_cache", axes=CACHE_AXES, sizes=names)
            # The caches first, as everywhere: out_t reads as weights only when the values are right.
            with diagnosed(case, (out, k_cache, v_cache)):
                expect.tensors(cache_items(k_cache, v_cache, ref_k, ref_v, variants_of, case.n_occ),
                               sizes=case.axis_sizes(), dtype=dtype, device=device)
        except CheckFailed as exc:
            raise _prefixed(exc, f"decoding step {t}", t) from None
        outs.append(out)
    got = cases.probe_weights(torch.stack([o.detach() for o in outs], dim=2))     # (B, H, L_q, L_k)
    got.lumen_meta = meta(outs[-1])
    try:
        expect.tensors([Expected(got, expected, "weights", ("B", "H", "L_q", "L_k"),
                                 lambda: mistakes.stream_variants(q, k, v, n_sink, window, cases.probe_weights))],
                       sizes={"B": B, "H": H, "L_q": L}, dtype=dtype, device=device)
    except CheckFailed as exc:
        diag = exc.diagnosis
        diag.summary = (f"decoding {L} tokens (n_sink = {n_sink}, window = {window}; zero queries and one-hot values, "
                        f"so out_t[..., s] is the weight of step t on token s): {diag.summary}")
        if diag.kind == "values" and not diag.misconception:
            diag.hint = (f"Step t must attend, with equal weights here, to tokens 0..{n_sink - 1} (the sinks) and to "
                         f"the last {window} tokens t-{window - 1}..t, itself included, and to nothing else: in the "
                         "picture, the sink columns and a band along the diagonal.")
        raise


# -------------------------------------------------------------------------------------------------
# Values, phase by phase


@pytest.mark.group("values")
def test_filling(submission, seed, device):
    """while the cache fills (n_seen = 4 < C = 7)"""
    check_step(submission, phase(seed, FILLING), device=device)


@pytest.mark.group("values")
def test_last_free_slot(submission, seed, device):
    """the new token fills the last free slot (n_seen = C - 1)"""
    check_step(submission, phase(seed, LAST_FREE_SLOT), device=device)


@pytest.mark.group("values")
def test_first_eviction(submission, seed, device):
    """the first eviction (n_seen = C = 7)"""
    check_step(submission, phase(seed, FIRST_EVICTION), device=device)


@pytest.mark.group("values")
def test_long_after(submission, seed, device):
    """long after: the ring has wrapped four times (n_seen = 25)"""
    check_step(submission, phase(seed, LONG_AFTER), device=device)


@pytest.mark.group("values")
def test_no_sinks(submission, seed, device):
    """n_sink = 0: a plain sliding window (multi-head, n_seen = 30)"""
    check_step(submission, phase(seed, NO_SINKS), device=device)


@pytest.mark.group("values")
def test_window_one(submission, seed, device):
    """window = 1: the sinks and the new token only (one KV head)"""
    check_step(submission, phase(seed, WINDOW_ONE), device=device)


# -------------------------------------------------------------------------------------------------
# The caller's caches, and their layout in memory


@pytest.mark.group("cache")
def test_caller_caches_unchanged(submission, seed, device):
    """the caller's caches are not modified"""
    case = phase(seed, LONG_AFTER)
    sent = case.args(torch.float32)
    result, _ = decode(submission, sent, device=device, echo_args=True)
    after = result.args_after
    if not isinstance(after, tuple) or len(after) != len(sent):
        raise fail("protocol", "the worker did not send the arguments back after the call")
    hint = ("Store the new token in a copy: k_cache = k_cache.clone(), then k_cache[:, :, slot] = k_t. Writing "
            "into the caches you were given (slice assignment, index_copy_, copy_) changes the caller's, who may "
            "still hold them (a beam search, a retry).")
    for name, before, now in zip(PARAMS, sent, after):
        if not isinstance(before, torch.Tensor):
            continue
        same = isinstance(now, torch.Tensor) and now.shape == before.shape and now.dtype == before.dtype \
            and torch.equal(now, before)
        if same:
            continue
        changed = int((now != before).sum()) if isinstance(now, torch.Tensor) and now.shape == before.shape else None
        how = f": {changed} of {before.numel()} values changed" if changed is not None else " (shape or dtype too)"
        raise fail("side-effect", f"streaming_decode_step wrote into the caller's {name}{how}",
                   details={"changed": changed}, hint=hint,
                   misconception="caller-cache-mutated" if name in ("k_cache", "v_cache") else None)


@pytest.mark.group("cache")
def test_noncontiguous_inputs(submission, seed, device):
    """non-contiguous inputs and caches"""
    check_step(submission, phase(seed, LONG_AFTER), device=device, noncontiguous=True)


# -------------------------------------------------------------------------------------------------
# Decoding whole sequences


def _prefixed(exc: CheckFailed, text: str, step: int) -> CheckFailed:
    exc.diagnosis.summary = f"{text}: {exc.diagnosis.summary}"
    exc.diagnosis.details["step"] = step
    return exc


@pytest.mark.group("decode")
def test_decode_matches_sink_attention(submission, seed, device):
    """token by token through the cache = attention over the sinks and the last window tokens"""
    s = cases.STREAM
    n_sink, window, L = s["n_sink"], s["window"], s["L"]
    q, k, v = cases.sequence(seed)                                              # float64
    full = ref.sink_window_attention(q, k, v, n_sink, window)                   # (B, H, L, d), no cache
    dtype = torch.float32
    C = n_sink + window
    ref_k = torch.zeros(s["B"], s["H_kv"], C, s["d"], dtype=torch.float64)       # the reference's own caches
    ref_v = torch.zeros_like(ref_k)
    k_cache, v_cache = ref_k.to(dtype), ref_v.to(dtype)                         # the learner's, fed back
    sizes = {"B": s["B"], "H": s["H"], "H_kv": s["H_kv"], "d": s["d"]}
    for t in range(L):
        case = cases.StepCase(q[:, :, t], k[:, :, t], v[:, :, t], ref_k, ref_v, t, n_sink, window, sizes)
        _, exp_k, exp_v = ref.streaming_decode_step(*case.fresh())
        expected = (full[:, :, t], exp_k, exp_v)
        args = [x.to(dtype) for x in case.tensors()[:3]] + [k_cache, v_cache, t, n_sink, window]
        _, got = decode(submission, args, device=device)
        # The first step reads empty caches: every mistake that leaves the new token out (attending
        # before writing it, a slot range one short) gives the same output there, so a match at that
        # step names no mistake; the later steps, and the tests above, tell them apart.
        variants = expected_step(case)[1] if t else (lambda which: None)
        try:
            check_outputs(got, expected, variants, case, dtype=dtype, device=device)
        except CheckFailed as exc:
            matched = "the first step" if t == 0 else f"steps 0-{t - 1} match but step {t}"
            raise _prefixed(exc, f"decoding {L} tokens (n_sink = {n_sink}, window = {window}, C = {C}) from empty "
                            f"caches, {matched} (n_seen = {t}) differs", t) from None
        _, k_cache, v_cache = got
        ref_k, ref_v = exp_k, exp_v


# -------------------------------------------------------------------------------------------------
# Dtypes


@pytest.mark.group("dtypes")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16], ids=["float64", "float16", "bfloat16"])
def test_dtype(submission, seed, device, dtype):
    """keeps the inputs' dtype"""
    # Bounded inputs, and the reference computed from them as rounded to ``dtype``: what is left is
    # the learner's arithmetic, well inside the tolerance at every seed (docs/tolerances.md).
    case = phase(seed, DTYPE_SIZES, bound=inputs.DTYPE_BOUND).rounded(dtype)
    check_step(submission, case, dtype=dtype, device=device)


# -------------------------------------------------------------------------------------------------
# CUDA (worth no points: not every machine has a GPU)


@pytest.mark.group("cuda")
def test_cuda(submission, seed, cuda):
    """runs on the GPU"""
    check_step(submission, phase(seed, LONG_AFTER), device=cuda)


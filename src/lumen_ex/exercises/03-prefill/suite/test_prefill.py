"""Hidden suite for exercise 3: prefill, causal multi-head (grouped-query) attention over a prompt.

Every test builds seeded float64 inputs on the CPU, computes the reference from them before the
call, sends the inputs (cast to the dtype under test) to the learner's code through ``submission``,
and checks what came back shape first. The docstring's first line is what the learner sees as the
test's name.

Axis names in feedback: B batch, L prompt tokens, H query heads (n_heads), H_kv key/value heads
(n_kv_heads), d_head the width of one head, d_model the model width.
"""

from __future__ import annotations

import re
from contextlib import contextmanager

import pytest
import torch

from lumen_ex.author import TOLERANCES, CheckFailed, Expected, exercise, expect, fail, inputs, meta, pictures

ref = exercise(__file__).reference
pv = exercise(__file__).mistakes
K_CACHE, V_CACHE, Y, prefill_variants = pv.K_CACHE, pv.V_CACHE, pv.Y, pv.prefill_variants
ref_kv = exercise(__file__, "02-kv-cache").reference      # the decode steps that continue a prefill

FN = "prefill"
PARAMS = ("x", "w_q", "w_k", "w_v", "w_o", "n_heads")
OUTPUTS = ("y", "k_cache", "v_cache")
Y_AXES = ("B", "L", "d_model")
CACHE_AXES = ("B", "H_kv", "L", "d_head")
AXES = (Y_AXES, CACHE_AXES, CACHE_AXES)

# Head layouts, on top of inputs.PREFILL_SIZES (B=3, n_heads=6, n_kv_heads=2, L=7, d_head=5, d_model=11).
GQA = {}                            # grouped-query: 3 query heads per KV head
MHA = {"n_kv_heads": 6}             # multi-head: one KV head per query head
MQA = {"n_kv_heads": 1}             # multi-query: one KV head for all
ONE = {"L": 1}                      # a one-token prompt
REALISTIC = {"B": 3, "n_heads": 8, "n_kv_heads": 2, "L": 40, "d_head": 16, "d_model": 96}
# For the dtype tests (float16 and bfloat16 are matched at 1e-2 and 2e-2): a wide head keeps the known
# mistakes apart, 1/sqrt(d_model) = 1/sqrt(29) far from 1/sqrt(d_head) = 1/sqrt(12) and from 1/d_head;
# all sizes stay distinct (L = 5, H*d_head = 72, H_kv*d_head = 24).
DTYPE_SIZES = {"L": 5, "d_head": 12, "d_model": 29}
# ... and the prompt clamped to +-1.5, not inputs.DTYPE_BOUND (2): the first tokens attend to one or two
# keys, so their outputs are single values, not averages, and bfloat16 rounding of them reached 0.87 of
# the tolerance at one seed in 2,000 (a hand-written softmax) with +-2; with +-1.5 at most 0.68, while
# the closest known mistake stays over 6 bfloat16 tolerances away.
DTYPE_BOUND = 1.5
# The decode test: a prompt of DECODE_PROMPT tokens, then DECODE_STEPS steps of exercise 2's decode_step.
DECODE_PROMPT, DECODE_STEPS = 4, 4
# The leakage test replaces one token at a time: token 0 by this many standard deviations of noise,
# every later token j by one whose key scores exactly LEAK_SCORE against an earlier query, and no
# more than that against any (planted_token).
PERTURBATION = 10.0
LEAK_SCORE = 300.0


def _projection_transposed(exc) -> bool:
    """A matmul size mismatch on a line that projects with F.linear(x, W) (which computes x @ W.T)
    or with a transposed weight: the weights here are (in, out) and sit on the right, x @ W."""
    if "cannot be multiplied" not in exc.message and "must match the size" not in exc.message:
        return False
    line = expect.failing_line(exc)
    return bool(re.search(r"\blinear\(|\bw_[qkvo]\w*\.(T|mT|t\(\))|\bw_[qkvo]\w*\.transpose\(", line))


def _transposes_fixed_axes(exc) -> bool:
    """A size mismatch on a line that transposes more than the last two axes of a (B, H, L, d_head)
    tensor for the scores: k.T (every axis), k.transpose(1, 2) and the like."""
    if not re.search(r"must match the size|Expected size for first two dimensions|cannot be multiplied", exc.message):
        return False
    line = expect.failing_line(exc)
    if "@" not in line and "matmul" not in line and "bmm" not in line:
        return False
    if re.search(r"\bk\w*\.T\b|\bk\w*\.t\(\)", line):
        return True
    return any({int(a), int(b)} not in ({-2, -1}, {2, 3})
               for a, b in re.findall(r"k\w*\.(?:transpose|swapaxes|swapdims)\(\s*(-?\d+)\s*,\s*(-?\d+)\s*\)", line))


# Exceptions whose cause is recognisable: (misconception, sentence, predicate).
NAMED_EXCEPTIONS = [
    ("projection-transposed", "the weights are (d_model, n_heads * d_head), laid out to sit on the right: project "
     "with x @ w_q. F.linear(x, W) computes x @ W.T, for PyTorch's (out, in) nn.Linear layout, and W.T "
     "transposes them the wrong way", _projection_transposed),
    ("fixed-axes-transposed", "the line that failed transposes axes other than the last two of the keys: for "
     "(B, n_heads, L, d_head) keys the scores need k.transpose(-2, -1) (k.T reverses every axis)",
     _transposes_fixed_axes),
]


def axis_sizes(s: dict) -> dict[str, int]:
    """Every axis name with its size, for naming the axes of a wrong shape (on a tie, the first name wins)."""
    named = {"B": s["B"], "L": s["L"], "H": s["n_heads"], "H_kv": s["n_kv_heads"], "d_head": s["d_head"],
             "d_model": s["d_model"], "H*d_head": s["n_heads"] * s["d_head"],
             "H_kv*d_head": s["n_kv_heads"] * s["d_head"]}
    out: dict[str, int] = {}
    for name, size in named.items():
        if size not in out.values():
            out[name] = size
    return out


@contextmanager
def shape_hints(case, got):
    """Replace the generic hint of a shape failure by the mistake its shape points to."""
    try:
        yield
    except CheckFailed as exc:
        diag = exc.diagnosis
        if diag.kind == "shape" and diag.misconception != "outputs-swapped":
            what = diag.summary.split(":")[0]
            tensor = dict(zip(OUTPUTS, got)).get(what)
            named = _shape_hint(what, list(diag.got or []), case, tensor)
            if named:
                diag.misconception, diag.hint = named
        raise


def _shape_hint(what: str, got: list[int], case, tensor) -> tuple[str | None, str] | None:
    """The mistake a wrong shape points to: (misconception, hint)."""
    s = case.sizes
    B, H, H_kv, L, d_head, D = (s[k] for k in ("B", "n_heads", "n_kv_heads", "L", "d_head", "d_model"))
    if what == "y":
        if got == [B, L, H * d_head]:
            return ("no-output-projection",
                    "y is still (B, L, n_heads * d_head): after merging the heads, apply the output projection w_o.")
        if got == [B, H, L, d_head]:
            return ("heads-not-merged", "y is still split into heads: transpose(1, 2) back to (B, L, n_heads, "
                    "d_head), reshape to (B, L, n_heads * d_head) and apply w_o.")
        if got == [B, D]:
            return ("last-position-only", "y has one row per batch item: prefill returns every token's output, "
                    "(B, L, d_model), not only the last one's (no y[:, -1], no squeeze).")
    elif len(got) == 4 and got == [B, L, H_kv, d_head] and L != H_kv:
        return ("cache-time-major", f"{what} is (B, L, n_kv_heads, d_head), the layout right after the head "
                f"split: decode_step reads (B, n_kv_heads, L, d_head), so return {what} after .transpose(1, 2).")
    elif got == [B, L, H_kv * d_head]:
        return ("cache-not-split", f"{what} is the projection before the head split: reshape it to "
                "(B, L, n_kv_heads, d_head) and transpose(1, 2) to (B, n_kv_heads, L, d_head).")
    elif got == [B, H, L, d_head] and H != H_kv:
        return _n_heads_cache(what, tensor, case)
    return None


def _n_heads_cache(what: str, tensor, case) -> tuple[str | None, str]:
    """A cache with n_heads heads: the queries, the expanded keys or values, or the attention output."""
    hint = (f"{what} holds n_heads heads: the caches keep n_kv_heads heads, {what[0]} = x @ w_{what[0]} split "
            "into (B, n_kv_heads, L, d_head); expand them to n_heads only for the attention (a small cache is the "
            "point of grouped-query attention).")
    if not isinstance(tensor, torch.Tensor) or tensor.is_meta or not tensor.dtype.is_floating_point:
        return None, hint
    x, w_q, w_k, w_v, _ = case.tensors()
    H, H_kv = case.sizes["n_heads"], case.sizes["n_kv_heads"]
    own = pv.split(x @ (w_k if what == "k_cache" else w_v), H_kv)            # (B, H_kv, L, d_head)
    named = [("cache-from-query", pv.split(x @ w_q, H),
              f"{what} holds the queries, x @ w_q split into n_heads heads: the caches keep the keys x @ w_k and "
              "the values x @ w_v, split into (B, n_kv_heads, L, d_head)."),
             ("cache-expanded", pv.expand(own, H), hint),
             ("cache-after-attention", ref_out(case),
              f"{what} holds each head's attention output: the caches keep every token's key and value before "
              "attention, x @ w_k and x @ w_v split into (B, n_kv_heads, L, d_head).")]
    tol = TOLERANCES.get(tensor.dtype, TOLERANCES[torch.float32])
    got64 = tensor.detach().to(torch.float64)
    for name, value, sentence in named:
        if expect.separation(got64, value, tol) <= 1.0:
            return name, sentence
    return None, hint


def ref_out(case) -> torch.Tensor:
    """The reference's per-head attention output (B, n_heads, L, d_head)."""
    return pv.prefill(*case.tensors(), case.n_heads)[3]


def run(submission, case, *, dtype=torch.float32, device="cpu", **options):
    """Call the learner's prefill on ``case``: the CallResult and its (y, k_cache, v_cache)."""
    with expect.exceptions_named(NAMED_EXCEPTIONS):
        result = submission.call(FN, tuple(case.args(dtype)), device=device, **options)
    return result, expect.returns(result.value, OUTPUTS, FN)


def expected(case):
    """The reference (y, k_cache, v_cache) in float64, and the variants of each, for ``case``."""
    args = (*case.tensors(), case.n_heads)
    return ref.prefill(*args), (lambda which: lambda: prefill_variants(*args, which=which))


def check_prefill(submission, case, *, dtype=torch.float32, device="cpu", only=(Y, K_CACHE, V_CACHE), **options):
    """The learner's (y, k_cache, v_cache) (those in ``only``) must match the float64 reference on ``case``."""
    want, variants = expected(case)          # from the inputs, before the call
    result, got = run(submission, case, dtype=dtype, device=device, **options)
    with shape_hints(case, got):
        expect.tensors([Expected(got[i], want[i], OUTPUTS[i], AXES[i], variants(i)) for i in only],
                       sizes=axis_sizes(case.sizes), dtype=dtype, device=device)
    return result, got


# -------------------------------------------------------------------------------------------------
# The contract


@pytest.mark.group("contract")
def test_signature(submission):
    """prefill has the stub's parameters"""
    expect.signature(submission, FN, PARAMS)


@pytest.mark.group("contract")
def test_returns_three_tensors(submission, seed, device):
    """returns (y, k_cache, v_cache)"""
    run(submission, inputs.prefill_case(seed), device=device)


# -------------------------------------------------------------------------------------------------
# Shapes


@pytest.mark.group("shapes")
@pytest.mark.parametrize("sizes", [GQA, ONE], ids=["L=7", "L=1"])
def test_shapes(submission, seed, device, sizes):
    """y (B, L, d_model), caches (B, H_kv, L, d_head)"""
    case = inputs.prefill_case(seed, **sizes)
    want, _ = expected(case)
    _, got = run(submission, case, device=device)
    with shape_hints(case, got):
        expect.shapes([Expected(g, e, name, ax) for g, e, name, ax in zip(got, want, OUTPUTS, AXES)],
                      sizes=axis_sizes(case.sizes))


# -------------------------------------------------------------------------------------------------
# Values


@pytest.mark.group("values")
@pytest.mark.parametrize("sizes", [GQA, MHA, MQA], ids=["gqa", "mha", "mqa"])
def test_values(submission, seed, device, sizes):
    """y and caches match the reference"""
    check_prefill(submission, inputs.prefill_case(seed, **sizes), device=device)


@pytest.mark.group("values")
def test_single_token(submission, seed, device):
    """a one-token prompt (L = 1)"""
    check_prefill(submission, inputs.prefill_case(seed, **ONE), device=device)


@pytest.mark.group("values")
def test_realistic_size(submission, seed, device):
    """realistic sizes (L = 40, d_head = 16)"""
    check_prefill(submission, inputs.prefill_case(seed, **REALISTIC), device=device)


@pytest.mark.group("values")
def test_noncontiguous_inputs(submission, seed, device):
    """non-contiguous inputs"""
    check_prefill(submission, inputs.prefill_case(seed), device=device, noncontiguous=True)


# -------------------------------------------------------------------------------------------------
# Causality


def _rows(t: torch.Tensor, keep: slice) -> torch.Tensor:
    """t[:, keep], keeping what the worker said about t (its device)."""
    out = t[:, keep]
    out.lumen_meta = meta(t)
    return out


@pytest.mark.group("causal")
def test_first_token_sees_only_itself(submission, seed, device):
    """the first token attends only to itself"""
    case = inputs.prefill_case(seed)
    (want_y, _, _), _ = expected(case)
    _, got = run(submission, case, device=device)
    names = axis_sizes(case.sizes)
    with shape_hints(case, got):
        expect.shape(got[Y], want_y.shape, what="y", axes=Y_AXES, sizes=names)
    first = slice(0, 1)
    args = (*case.tensors(), case.n_heads)
    try:
        expect.tensors([Expected(_rows(got[Y], first), want_y[:, first], "y[:, :1]", Y_AXES,
                                 lambda: prefill_variants(*args, which=Y, positions=first))],
                       sizes=names, dtype=torch.float32, device=device)
    except CheckFailed as exc:
        if not exc.diagnosis.misconception:
            exc.diagnosis.hint = ("Token 0 has no earlier token: it attends to itself alone, with weight 1, so its "
                                  "output is its own value (each query head reading its KV head), merged and "
                                  "projected by w_o. Check the diagonal of your causal mask and the softmax axis.")
        raise


def planted_token(case, j: int) -> torch.Tensor:
    """A token for position j >= 1, (B, d_model), whose key scores exactly LEAK_SCORE (scaled by
    1/sqrt(d_head)) against the longest earlier query (over the positions before j and every head),
    and at most that against every other: its key is that query, rescaled, in that query's KV head,
    and 0 in the others. So a softmax over all keys is swamped at every seed, and a -1e4 mask is not."""
    s = case.sizes
    B, H, H_kv, d = s["B"], s["n_heads"], s["n_kv_heads"], s["d_head"]
    assert H_kv * d <= s["d_model"], "the planted key needs w_k of full column rank"
    q = pv.split(case.x[:, :j] @ case.w_q, H)                           # (B, H, j, d_head)
    best = q.norm(dim=-1).reshape(B, H * j).argmax(dim=1)               # (B,): the longest query
    rows = torch.arange(B)
    head, pos = best // j, best % j
    keys = torch.zeros(B, H_kv, d, dtype=torch.float64)                 # (B, H_kv, d_head)
    keys[rows, head // (H // H_kv)] = inputs.aligned_key(q[rows, head, pos], LEAK_SCORE)
    return keys.reshape(B, H_kv * d) @ torch.linalg.pinv(case.w_k)      # (B, d_model): token @ w_k = keys


@pytest.mark.group("causal")
def test_no_future_leakage(submission, seed, device):
    """changing a later token never changes an earlier output"""
    case = inputs.prefill_case(seed)
    s = case.sizes
    B, L, D = s["B"], s["L"], s["d_model"]
    names = axis_sizes(s)
    want_shape = (B, L, D)
    _, (base, _, _) = run(submission, case, device=device)
    expect.shape(base, want_shape, what="y", axes=Y_AXES, sizes=names)
    base = base.detach().to(torch.float64)
    tol = TOLERANCES[torch.float32]
    gen = inputs.generator(seed + 1)
    depends = torch.zeros(L, L, dtype=torch.bool)            # [i, j]: output i changed when token j changed
    change = torch.zeros(L, L, dtype=torch.float64)
    for j in range(L):
        x = case.x.clone()
        # (B, d_model): only token j differs. A later token's planted score of 300 is far above every
        # allowed one (unit variance): a softmax over all keys, zeroed and renormalised afterwards,
        # underflows to 0/0 in float32, and an additive mask of -100 is beaten, at every seed; no score
        # against it exceeds 300, so -1e4, -1e9, finfo.min and -inf masks hide it to the last bit.
        x[:, j] = inputs.randn(gen, B, D) * PERTURBATION if j == 0 else planted_token(case, j)
        _, (y, _, _) = run(submission, case.with_x(x), device=device)
        # The same call shape as the first one: a submission must not make our arithmetic below fail.
        expect.shape(y, want_shape, what="y", axes=Y_AXES, sizes=names)
        y = y.detach().to(torch.float64)
        same = (y == base) | (torch.isnan(y) & torch.isnan(base))           # NaN where it was NaN is no change
        diff = torch.where(same, 0.0, torch.nan_to_num((y - base).abs(), nan=float("inf")))   # (B, L, d_model)
        depends[:, j] = (diff > tol.atol + tol.rtol * base.abs()).any(dim=2).any(dim=0)
        change[:, j] = diff.amax(dim=(0, 2))
    leaks = depends & ~torch.ones(L, L, dtype=torch.bool).tril()
    if not bool(leaks.any()):
        return
    i, j = (int(n) for n in leaks.nonzero()[0])
    seen = [int(n) for n in depends[i].nonzero().flatten()]
    by = float(change[i, j])
    how = f"changed (by up to {by:.3g})" if by != float("inf") else "became NaN or inf"
    failure = fail("property", f"y at position {i} {how} when only token {j}, "
                   f"a later one, changed: token {i} depends on tokens {seen}, and may depend only on "
                   f"{'itself' if i == 0 else f'tokens 0..{i}'}",
                   details={"position": i, "token": j, "leaks": int(leaks.sum())},
                   hint="Token i may see tokens 0..i only, whatever the later tokens hold. Before the softmax, "
                        "fill the scores of later tokens with -inf: scores.masked_fill(~torch.ones(L, L, "
                        "dtype=torch.bool, device=x.device).tril(), float('-inf')). A finite fill such as -100 can be "
                        "beaten by a large score, and zeroing the weights after a softmax over every key (or "
                        "multiplying the scores by the mask) still lets later tokens in.",
                   misconception="future-leak")
    # The picture: which tokens each output depends on; the allowed part as observed, the rest False.
    raise pictures.attach(failure, depends, depends & ~leaks, what="tokens each output depends on",
                          axes=("L", "L"))


# -------------------------------------------------------------------------------------------------
# The caches


@pytest.mark.group("cache")
def test_caches_hold_keys_and_values(submission, seed, device):
    """the caches hold every token's key and value"""
    try:
        check_prefill(submission, inputs.prefill_case(seed), device=device, only=(K_CACHE, V_CACHE))
    except CheckFailed as exc:
        if exc.diagnosis.kind == "values" and not exc.diagnosis.misconception:
            exc.diagnosis.hint = ("k_cache[:, j, t] must be token t's key for KV head j, the columns "
                                  "j * d_head .. (j + 1) * d_head of x[:, t] @ w_k, and v_cache the same with w_v: "
                                  "(x @ w_k).reshape(B, L, n_kv_heads, d_head).transpose(1, 2).")
        raise


@pytest.mark.group("cache")
def test_inputs_unchanged(submission, seed, device):
    """the inputs are not modified"""
    case = inputs.prefill_case(seed)
    sent = case.args(torch.float32)
    with expect.exceptions_named(NAMED_EXCEPTIONS):
        result = submission.call(FN, tuple(sent), device=device, echo_args=True)
    expect.returns(result.value, OUTPUTS, FN)
    after = result.args_after
    if not isinstance(after, tuple) or len(after) != len(sent):
        raise fail("protocol", "the worker did not send the arguments back after the call")
    hint = ("Use out-of-place operations on the inputs (w = w_q / s, not w_q /= s or w_q.mul_(s); no slice "
            "assignment, .data = or set_): the caller keeps using x and the weights after the prompt.")
    for name, before, now in zip(PARAMS, sent, after):
        if not isinstance(before, torch.Tensor):
            continue
        if (not isinstance(now, torch.Tensor) or now.shape != before.shape or now.dtype != before.dtype
                or not torch.equal(now, before)):
            changed = (int((now != before).sum()) if isinstance(now, torch.Tensor) and now.shape == before.shape
                       else before.numel())
            raise fail("side-effect", f"prefill modified its input {name} in place: {changed} of {before.numel()} "
                       "values changed", details={"input": name, "changed": changed}, hint=hint,
                       misconception="inputs-modified")


# -------------------------------------------------------------------------------------------------
# Prefill, then decode


@pytest.mark.group("decode")
def test_prefill_then_decode(submission, seed, device):
    """prefill, then decode_step, = full causal attention"""
    P, steps = DECODE_PROMPT, DECODE_STEPS
    whole = inputs.prefill_case(seed, L=P + steps)
    prompt = whole.with_x(whole.x[:, :P])
    (full, _, _), _ = expected(whole)                             # (B, P + steps, d_model)
    try:
        _, (_, k_cache, v_cache) = check_prefill(submission, prompt, device=device)
    except CheckFailed as exc:
        exc.diagnosis.summary = f"prefill of a {P}-token prompt: {exc.diagnosis.summary}"
        raise
    # Exercise 2's reference decode_step continues from the learner's caches, in float64.
    k_cache, v_cache = k_cache.detach().to(torch.float64), v_cache.detach().to(torch.float64)
    tol = TOLERANCES[torch.float32]
    weights = (whole.w_q, whole.w_k, whole.w_v, whole.w_o)
    for t in range(P, P + steps):
        y_t, k_cache, v_cache = ref_kv.decode_step(whole.x[:, t], k_cache, v_cache, *weights, whole.n_heads)
        err = float((y_t - full[:, t]).abs().max())
        if not expect.separation(y_t, full[:, t], tol) <= 1.0:
            raise fail("values", f"decode_step, continuing from your caches, gives y_t at position {t} (step "
                       f"{t - P + 1} after the {P}-token prompt) up to {err:.3g} away from full causal attention",
                       expected="full causal attention", got=f"max error {err:.3g}", details={"position": t},
                       hint="decode_step reads the caches as (B, n_kv_heads, T, d_head), oldest token first: "
                            "return the keys x @ w_k and values x @ w_v split into KV heads, in that layout.")


# -------------------------------------------------------------------------------------------------
# Dtypes


@pytest.mark.group("dtypes")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16], ids=["float64", "float16", "bfloat16"])
def test_dtype(submission, seed, device, dtype):
    """keeps the inputs' dtype"""
    # Bounded inputs, and the reference computed from them as rounded to ``dtype``: what is left is
    # the learner's arithmetic, well inside the tolerance at every seed (docs/tolerances.md).
    case = inputs.prefill_case(seed, bound=DTYPE_BOUND, **DTYPE_SIZES).rounded(dtype)
    check_prefill(submission, case, dtype=dtype, device=device)


@pytest.mark.group("dtypes")
def test_runs_on_meta(submission, seed):
    """works on the inputs' device (checked on meta)"""
    # Every input on meta (shape, dtype and device, no data): a tensor created without device= (a
    # causal mask from torch.ones(L, L)) meets them in one operation and torch raises (named
    # "new-tensor-device"), as it would on a GPU. Shapes, dtypes and devices are checked.
    check_prefill(submission, inputs.prefill_case(seed), device="meta")


# -------------------------------------------------------------------------------------------------
# CUDA (worth no points: not every machine has a GPU)


@pytest.mark.group("cuda")
def test_cuda(submission, seed, cuda):
    """runs on the GPU"""
    check_prefill(submission, inputs.prefill_case(seed), device=cuda)

"""Hidden suite for exercise 11: quantize_kv and int8_decode_step, an int8 KV cache.

Every test builds seeded float64 inputs on the CPU (src/lumen_ex/exercises/11-int8-kv/suite/cases.py:
rows built so that their int8 codes are certain), sends them to the learner's code through
``submission`` (floats cast to the dtype under test, codes as int8), and checks what came back in
stages: every shape, then every dtype (codes int8, scales and out_t in the inputs' dtype) and
device, then the values: the scales before the codes (a wrong scale explains wrong codes), the
caches before out_t. The docstring's first line is what the learner sees as the test's name.

Codes are compared exactly for float32 and float64 inputs, and within one code for float16 and
bfloat16 (whose division rounds), never -128 (the contract clamps to [-127, 127]); scales within the
dtype's relative tolerance. out_t is compared
with attention computed in float64 from the learner's OWN returned caches (codes times scales), so
a quantization mistake is charged once, to the caches.

Axis names in feedback: B batch, H query heads, H_kv key/value heads, T cached tokens (T+1 after
the step), d the width of one head; "1" is the scales' last axis.
"""

from __future__ import annotations

import pytest
import torch

from lumen_ex.author import CheckFailed, Expected, Tolerance, exercise, expect, fail, meta, pictures, sibling

mistakes = exercise(__file__).mistakes
cases = sibling(__file__, "suite/cases")

QFN, DFN = "quantize_kv", "int8_decode_step"
Q_PARAMS = ("x",)
D_PARAMS = ("q_t", "k_q", "k_scale", "v_q", "v_scale", "k_t", "v_t")
Q_OUTPUTS = ("x_q", "scale")
D_OUTPUTS = ("out_t", "k_q", "k_scale", "v_q", "v_scale")
X_AXES = ("B", "H_kv", "T", "d")
XS_AXES = ("B", "H_kv", "T", "1")
OUT_AXES = ("B", "H", "d")
CACHE_AXES = ("B", "H_kv", "T+1", "d")
CS_AXES = ("B", "H_kv", "T+1", "1")
EXACT = Tolerance(0.0, 0.0)
ONE_CODE = Tolerance(1.0, 0.0)
MQA = {"H_kv": 1}
L_SEQUENCE = 4           # tokens decoded from an empty cache


def code_tol(dtype: torch.dtype) -> Tolerance:
    """Codes: exact where the inputs keep x / scale away from half-integers (float32, float64);
    within one code where the division itself rounds (float16, bfloat16)."""
    return EXACT if dtype in (torch.float32, torch.float64) else ONE_CODE


def scale_tol(dtype: torch.dtype) -> Tolerance:
    """Scales: the dtype's relative tolerance (an absolute one would let any scale near 0.01 pass)."""
    return Tolerance(0.0, expect.TOLERANCES[dtype].rtol)


def axis_sizes(s: dict) -> dict[str, int]:
    named = {"B": s["B"], "H": s["H"], "H_kv": s["H_kv"], "T+1": s["T"] + 1, "T": s["T"], "d": s["d"]}
    out: dict[str, int] = {}
    for name, size in named.items():
        if size not in out.values():
            out[name] = size
    return out


def _dt(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# -------------------------------------------------------------------------------------------------
# Staged checks of several tensors of different dtypes


def _shape_hint(what: str, got: list[int], want: list[int]) -> tuple[str, str] | None:
    """The mistake a wrong scale shape points to: (misconception, hint)."""
    if "scale" not in what:
        return None
    if all(n == 1 for n in got):
        return ("scale-per-tensor", f"{what} is a single number: quantize each row (each token of each head) with "
                "its own scale, x.abs().amax(dim=-1, keepdim=True) / 127, shaped (..., 1).")
    if len(got) == len(want) and got[-1] == 1 and got[-2] == 1 and want[-2] > 1 and got[:-2] == want[:-2]:
        return ("scale-per-head", f"{what} has one scale per head: every token needs its own, so take the absmax "
                "over the last axis only, amax(dim=-1, keepdim=True).")
    if got == want[:-1]:
        return ("scale-squeezed", f"{what} lost its last axis: keep it, amax(dim=-1, keepdim=True), so the scale is "
                "(..., 1) and x / scale broadcasts.")
    return None


def _raw_new_token(got: torch.Tensor, sent_new: torch.Tensor | None) -> bool:
    """The last token of a floating-point cache holds the new token's raw key or value."""
    if sent_new is None or got.dim() != 4 or got.shape[2] < 1 or tuple(got[:, :, -1].shape) != tuple(sent_new.shape):
        return False
    tol = expect.TOLERANCES.get(sent_new.dtype, expect.TOLERANCES[torch.float32])
    return expect.separation(got[:, :, -1], sent_new, tol) <= 1.0


def _codes_dtype(it: Expected, raw: torch.Tensor | None) -> None:
    got = it.got.dtype
    if got == torch.int8:
        return
    if got.is_floating_point and _raw_new_token(it.got, raw):
        raise fail("dtype", f"{it.what} has dtype {_dt(got)}: the new token was appended unquantized, so "
                   "torch.cat promoted the whole cache to floating point", expected="int8", got=_dt(got),
                   misconception="new-token-stored-raw",
                   hint="Quantize the new key and value first (codes, scale = quantize_kv(k_t)) and append the "
                        "int8 codes to k_q and the scale to k_scale; the cache stays int8.")
    raise fail("dtype", f"{it.what} has dtype {_dt(got)}; the codes must be int8", expected="int8", got=_dt(got),
               misconception="codes-not-int8",
               hint="After rounding and clamping, cast the codes: .to(torch.int8). torch.round keeps a floating "
                    "dtype, and .long() gives int64.")


def staged(items: list[tuple[Expected, torch.dtype]], *, sizes: dict[str, int], device: str,
           raw: dict[str, torch.Tensor] | None = None, values: tuple[str, ...] | None = None,
           only_shapes: bool = False) -> None:
    """expect.tensors' stages over tensors of different dtypes: every shape, every dtype, every
    device, then the values in the order given (of the tensors named in ``values``; all by default).
    ``raw``: the new token's key and value as sent, by the name of the cache they go into (to
    recognise them appended unquantized). ``only_shapes``: the first stage alone."""
    for it, _ in items:
        it.got = expect.is_tensor(it.got, it.what)
    try:
        expect.shapes([it for it, _ in items], sizes=sizes)
    except CheckFailed as exc:
        diag = exc.diagnosis
        what = diag.summary.split(":")[0]
        if diag.kind == "shape" and diag.misconception != "outputs-swapped":
            named = _shape_hint(what, list(diag.got or []), list(diag.expected or []))
            if named:
                diag.misconception, diag.hint = named
        raise
    if only_shapes:
        return
    for it, dtype in items:
        if dtype == torch.int8:
            _codes_dtype(it, (raw or {}).get(it.what))
        elif it.got.dtype != dtype:
            expect.tensors([it], sizes=sizes, dtype=dtype, device=device)      # raises the dtype failure
    for it, dtype in items:
        if meta(it.got).device.split(":")[0] != device.split(":")[0]:
            expect.tensors([it], sizes=sizes, dtype=dtype, device=device)      # raises the device failure
    for it, dtype in items:
        if values is not None and it.what not in values:
            continue
        try:
            expect.tensors([it], sizes=sizes, dtype=dtype, device=device)
        except CheckFailed as exc:
            if dtype == torch.int8 and exc.diagnosis.kind == "values":
                tol = it.tol or EXACT
                rows = "tokens" if it.got.dim() >= 2 else "queries"
                pictures.attach(exc, it.got, it.value, what=it.what, axes=it.axes, atol=tol.atol, rtol=tol.rtol,
                                rows=rows, cols="channels", kind="codes")
            raise


def _echoed(result, sent) -> tuple:
    after = result.args_after
    if not isinstance(after, tuple) or len(after) != len(sent):
        raise fail("protocol", "the worker did not send the arguments back after the call")
    return after


def check_unchanged(result, sent, params, fn: str) -> None:
    """The caller's tensors are as they were sent, bitwise."""
    for name, before, now in zip(params, sent, _echoed(result, sent)):
        if not isinstance(before, torch.Tensor):
            continue
        same = (isinstance(now, torch.Tensor) and now.shape == before.shape and now.dtype == before.dtype
                and torch.equal(now, before))
        if not same:
            raise fail("side-effect", f"{fn} changed the caller's {name} in place", misconception="input-modified",
                       hint="Compute out of place: x / scale, not x /= scale or x.div_(scale); torch.cat builds the "
                            "grown caches as new tensors. The caller still owns every argument.")


# -------------------------------------------------------------------------------------------------
# quantize_kv


def quantize(submission, x: torch.Tensor, *, dtype=torch.float32, device="cpu", **options):
    """Call the learner's quantize_kv on ``x`` cast to ``dtype``: the CallResult, (x_q, scale), the sent x."""
    sent = (x.to(dtype),)
    with expect.exceptions_named([]):
        result = submission.call(QFN, sent, device=device, **options)
    return result, expect.returns(result.value, Q_OUTPUTS, QFN), sent


def check_quantize(submission, x: torch.Tensor, *, dtype=torch.float32, device="cpu", zero_rows=()):
    """quantize_kv(x): shapes, dtypes, then the zero rows' scales, the scales, the codes' range and the codes."""
    x = x.to(dtype).to(torch.float64)                            # what the learner gets, exactly
    exp_codes, exp_scale = cases.quantize64(x)
    result, (x_q, scale), sent = quantize(submission, x, dtype=dtype, device=device, echo_args=True)
    sizes = axis_sizes(cases.SIZES | {"T": x.shape[2]})
    items = [(Expected(scale, exp_scale, "scale", XS_AXES, lambda: mistakes.code_variants(x, which="scale",
                                                                                          what="your scale"),
                       scale_tol(dtype)), dtype),
             (Expected(x_q, exp_codes, "x_q", X_AXES, lambda: mistakes.code_variants(x, x_q), code_tol(dtype)),
              torch.int8)]
    staged(items, sizes=sizes, device=device, values=())     # shapes, dtypes, devices: then the values mean something
    check_unchanged(result, sent, Q_PARAMS, QFN)
    for b, h, t in zero_rows:
        got = float(scale[b, h, t, 0])
        if got != 1.0:
            made = ("amax / 127 = 0 became its scale (and 0 / 0 = NaN its codes)" if got == 0.0
                    else "a clamped amax (a tiny epsilon) became its scale" if 0.0 < got < 1e-3
                    else f"it got scale {got:.6g}")
            raise fail("values", f"scale[B={b}, H_kv={h}, T={t}] is {got:.6g} for a row of zeros; it must be 1",
                       expected=1.0, got=got, misconception="zero-row-scale",
                       details={"zero_rows": [list(r) for r in zero_rows]},
                       hint=f"For a row of zeros {made}: give such a row scale 1 (its codes are then 0), "
                            "torch.where(amax == 0, torch.ones_like(amax), amax / 127).")
    staged(items, sizes=sizes, device=device, values=("scale",))
    check_code_range(x_q, "x_q", X_AXES, scale, x)        # after the scales (the cause), before the codes' values
    staged(items, sizes=sizes, device=device, values=("x_q",))
    return result


def check_code_range(codes, what: str, axes, scale, x) -> None:
    """Codes may differ from the reference's by one in float16 and bfloat16, but never leave [-127, 127],
    where the contract's clamp keeps them: -128, the one int8 value below, is never a right code.
    ``x``: the float64 rows quantized, (..., d) like ``codes``, or (B, H_kv, d) for a grown cache's last
    token (the older tokens are the caller's); it names scale = amax / 128 when the row's scale is it."""
    low = codes.detach().to("cpu", torch.int16) < -127                                    # (..., d)
    if not bool(low.any()):
        return
    at = [int(i) for i in low.nonzero()[0]]
    where = ", ".join(f"{axis}={i}" for axis, i in zip(axes, at))
    row = x[tuple(at[:-1])] if x.dim() == codes.dim() else x[tuple(at[:2])] if at[2] == codes.shape[2] - 1 else None
    named = {}
    if row is not None:
        amax, got = float(row.abs().max()), float(scale.detach().to("cpu", torch.float64)[(*at[:-1], 0)])
        if abs(got - amax / 128) < abs(got - amax / 127):
            fix = next(c[2] for c in mistakes.QUANT_CANDIDATES if c[0] == "divide-by-128")
            named = {"misconception": "divide-by-128", "hint": f"This row's scale is amax / 128: {fix}."}
    raise fail("values", f"{what}[{where}] is -128 ({int(low.sum())} of {low.numel()} codes are): the codes of a "
                         "symmetric quantization run from -127 to 127", expected="-127 to 127", got=-128,
               details={"index": at, "mismatched": int(low.sum()), "total": low.numel()},
               **({"hint": "Clamp to [-127, 127] before the cast: torch.round(x / scale).clamp(-127, 127)."} | named))


# -------------------------------------------------------------------------------------------------
# int8_decode_step


def decode(submission, args, *, device="cpu", **options):
    """Call the learner's int8_decode_step: the CallResult and its five outputs."""
    with expect.exceptions_named([]):
        result = submission.call(DFN, tuple(args), device=device, **options)
    return result, expect.returns(result.value, D_OUTPUTS, DFN)


def check_decode(submission, case, *, dtype=torch.float32, device="cpu", args=None, expected=None, **options):
    """int8_decode_step on ``case``: the grown caches against the reference, then out_t against
    attention over the learner's own caches. ``expected``: the caches (float64) when not the case's."""
    case = case.rounded(dtype)
    args = list(args if args is not None else case.args(dtype))
    exp_kq, exp_ks, exp_vq, exp_vs = expected if expected is not None else case.expected_caches()
    result, got = decode(submission, args, device=device, **options)
    out, k_q, k_scale, v_q, v_scale = got
    k_t, v_t = case.k_t, case.v_t
    old_k, old_ks, old_v, old_vs = (t.to(torch.float64) for t in (args[1], args[2], args[3], args[4]))
    ct, st = code_tol(dtype), scale_tol(dtype)
    # out_t's reference and variants come from the learner's own caches, once they are shown right
    own = lambda: [t.detach().to("cpu", torch.float64) for t in (k_q, k_scale, v_q, v_scale)]   # noqa: E731
    q64 = case.q_t
    items = [
        (Expected(k_scale, exp_ks, "k_scale", CS_AXES,
                  lambda: mistakes.cache_variants(old_ks, k_t, which="scale", what="your k_scale"), st), dtype),
        (Expected(k_q, exp_kq, "k_q", CACHE_AXES,
                  lambda: mistakes.cache_variants(old_k, k_t, k_q, what="your k_q"), ct), torch.int8),
        (Expected(v_scale, exp_vs, "v_scale", CS_AXES,
                  lambda: mistakes.cache_variants(old_vs, v_t, which="scale", what="your v_scale"), st), dtype),
        (Expected(v_q, exp_vq, "v_q", CACHE_AXES,
                  lambda: mistakes.cache_variants(old_v, v_t, v_q, what="your v_q"), ct), torch.int8),
    ]
    sizes = axis_sizes(case.sizes)
    exp_shape = torch.zeros(case.sizes["B"], case.sizes["H"], case.sizes["d"], dtype=torch.float64)   # (B, H, d)
    # every stage of every output (out_t's shape and dtype too), then the caches' values
    staged([(Expected(out, exp_shape, "out_t", OUT_AXES), dtype), *items], sizes=sizes, device=device,
           raw={"k_q": args[5], "v_q": args[6]}, values=("k_scale", "k_q", "v_scale", "v_q"))
    check_code_range(k_q, "k_q", CACHE_AXES, k_scale, k_t)
    check_code_range(v_q, "v_q", CACHE_AXES, v_scale, v_t)
    ref_out = mistakes.attend(q64, *own())                                          # (B, H, d), float64
    variants = lambda: mistakes.out_variants(q64, *own(), new=(k_t, v_t), dtype=dtype)   # noqa: E731
    expect.tensors([Expected(out, ref_out, "out_t", OUT_AXES, variants)], sizes=sizes, dtype=dtype, device=device)
    return result, got


# -------------------------------------------------------------------------------------------------
# The contract


@pytest.mark.group("contract")
def test_signatures(submission):
    """quantize_kv(x) and int8_decode_step(q_t, k_q, k_scale, v_q, v_scale, k_t, v_t)"""
    expect.signature(submission, QFN, Q_PARAMS)
    expect.signature(submission, DFN, D_PARAMS)


@pytest.mark.group("contract")
def test_returns(submission, seed, device):
    """quantize_kv returns (x_q, scale); int8_decode_step returns five tensors"""
    quantize(submission, cases.quant_input(seed), device=device)
    decode(submission, cases.decode_case(seed).args(torch.float32), device=device)


# -------------------------------------------------------------------------------------------------
# Shapes


@pytest.mark.group("shapes")
def test_quantize_shapes(submission, seed, device):
    """x_q like x, scale (..., 1): one per token and head"""
    x = cases.quant_input(seed)
    exp_codes, exp_scale = cases.quantize64(x)
    _, (x_q, scale), _ = quantize(submission, x, device=device)
    staged([(Expected(x_q, exp_codes, "x_q", X_AXES), torch.int8),
            (Expected(scale, exp_scale, "scale", XS_AXES), torch.float32)],
           sizes=axis_sizes(cases.SIZES), device=device, only_shapes=True)


@pytest.mark.group("shapes")
def test_decode_shapes(submission, seed, device):
    """out_t (B, H, d); caches grow to T+1, from T=7 and from an empty cache (T=0)"""
    for T in (cases.SIZES["T"], 0):
        case = cases.decode_case(seed, T=T)
        exp_kq, exp_ks, exp_vq, exp_vs = case.expected_caches()
        args = case.args(torch.float32)
        _, (out, k_q, k_scale, v_q, v_scale) = decode(submission, args, device=device)
        s = case.sizes
        try:
            staged([(Expected(out, torch.zeros(s["B"], s["H"], s["d"]), "out_t", OUT_AXES), torch.float32),
                    (Expected(k_q, exp_kq, "k_q", CACHE_AXES), torch.int8),
                    (Expected(k_scale, exp_ks, "k_scale", CS_AXES), torch.float32),
                    (Expected(v_q, exp_vq, "v_q", CACHE_AXES), torch.int8),
                    (Expected(v_scale, exp_vs, "v_scale", CS_AXES), torch.float32)],
                   sizes=axis_sizes(s), device=device, only_shapes=True)
        except CheckFailed as exc:
            if T == 0:
                exc.diagnosis.summary = f"with an empty cache (T = 0): {exc.diagnosis.summary}"
            raise


# -------------------------------------------------------------------------------------------------
# quantize_kv's values


@pytest.mark.group("quantize")
def test_quantize_values(submission, seed, device):
    """scales amax / 127 per token and head, codes rounded to nearest (float32, exact)"""
    check_quantize(submission, cases.quant_input(seed), device=device)


@pytest.mark.group("quantize")
def test_zero_rows(submission, seed, device):
    """a row of zeros gets scale 1 and codes 0"""
    x = cases.quant_input(seed, zero_rows=cases.ZERO_ROWS)
    check_quantize(submission, x, device=device, zero_rows=cases.ZERO_ROWS)


# -------------------------------------------------------------------------------------------------
# int8_decode_step's values


@pytest.mark.group("decode")
@pytest.mark.parametrize("sizes", [{}, MQA], ids=["gqa", "mqa"])
def test_decode_values(submission, seed, device, sizes):
    """the new token quantized and appended; out_t = attention over your dequantized caches"""
    check_decode(submission, cases.decode_case(seed, **sizes), device=device)


@pytest.mark.group("decode")
def test_decode_from_empty_cache(submission, seed, device):
    """token by token from an empty cache (T = 0), your own caches fed back"""
    q, k, v, s = cases.sequence(seed, L_SEQUENCE)
    B, Hkv, d = s["B"], s["H_kv"], s["d"]
    k_q, v_q = torch.zeros(B, Hkv, 0, d, dtype=torch.int8), torch.zeros(B, Hkv, 0, d, dtype=torch.int8)
    k_scale, v_scale = torch.zeros(B, Hkv, 0, 1), torch.zeros(B, Hkv, 0, 1)
    for t in range(L_SEQUENCE):
        codes_k, scales_k = cases.quantize64(k[: t + 1].to(torch.float32))          # (t+1, B, H_kv, d), (.., 1)
        codes_v, scales_v = cases.quantize64(v[: t + 1].to(torch.float32))
        to_cache = lambda c: c.permute(1, 2, 0, 3)                                  # noqa: E731 (B, H_kv, t+1, .)
        expected = (to_cache(codes_k), to_cache(scales_k), to_cache(codes_v), to_cache(scales_v))
        case = cases.DecodeCase(q[t], k_q, k_scale, v_q, v_scale, k[t], v[t], {**s, "T": t})
        args = [q[t].float(), k_q, k_scale, v_q, v_scale, k[t].float(), v[t].float()]
        try:
            _, got = check_decode(submission, case, device=device, args=args, expected=expected)
        except CheckFailed as exc:
            diag = exc.diagnosis
            step = "the first step (T = 0)" if t == 0 else f"steps 1-{t} match but step {t + 1} (T = {t})"
            diag.summary = f"decoding {L_SEQUENCE} tokens from an empty cache, {step} differs: {diag.summary}"
            diag.details["step"] = t
            raise
        _, k_q, k_scale, v_q, v_scale = got


# -------------------------------------------------------------------------------------------------
# The caller's tensors and their layout


@pytest.mark.group("inputs")
def test_noncontiguous_inputs_unchanged(submission, seed, device):
    """non-contiguous inputs work, and no argument is modified"""
    case = cases.decode_case(seed)
    sent = case.args(torch.float32)
    result, _ = check_decode(submission, case, device=device, args=sent, noncontiguous=True, echo_args=True)
    check_unchanged(result, sent, D_PARAMS, DFN)


# -------------------------------------------------------------------------------------------------
# Dtypes


@pytest.mark.group("dtypes")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16], ids=["float64", "float16", "bfloat16"])
def test_dtype(submission, seed, device, dtype):
    """scales and out_t keep the inputs' dtype, codes stay int8"""
    # float16 and bfloat16: codes within one of the reference's, scales within the dtype's relative
    # tolerance; smaller keys and values keep the attention scores of order 1.
    check_quantize(submission, cases.quant_input(seed, amax=cases.KV_AMAX_LOW), dtype=dtype, device=device)
    check_decode(submission, cases.decode_case(seed, kv_amax=cases.KV_AMAX_LOW), dtype=dtype, device=device)


# -------------------------------------------------------------------------------------------------
# CUDA (worth no points: not every machine has a GPU)


@pytest.mark.group("cuda")
def test_cuda(submission, seed, cuda):
    """runs on the GPU"""
    check_quantize(submission, cases.quant_input(seed), device=cuda)
    check_decode(submission, cases.decode_case(seed), device=cuda)

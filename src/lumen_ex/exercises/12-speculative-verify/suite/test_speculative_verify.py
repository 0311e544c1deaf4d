"""Hidden suite for exercise 12: speculative_verify, the verification step of speculative sampling.

Every value test builds a seeded float64 case on the CPU from a fixed plan (which draft of each
sequence is the first rejected one: src/lumen_ex/exercises/12-speculative-verify/suite/cases.py),
computes the reference from it before the call, sends the inputs (the probabilities and uniforms
in the dtype under test, the drafted tokens int64) to the learner's code through ``submission``,
and checks what came back: the two outputs, their shapes (B,), their dtype (int64, whatever the
inputs' dtype) and device, then n_accepted exactly, then next_token exactly. When n_accepted is
wrong the feedback draws the accepted drafts per (sequence, position), expected against yours.

Axis names in feedback: B sequences, K drafted tokens per sequence, K+1 the target's positions, V
the vocabulary.

The statistical test (test_emits_target_distribution) checks the property that makes speculative
sampling worth doing: the tokens it emits are distributed exactly as the target model's. The bound
and why it separates a correct file from every known mistake at every seed:

- One pair of draft and target distributions (cases.STAT_Q, cases.STAT_P; K = 2, V = 6), N = 4000
  sequences, the drafted tokens drawn from the draft, the uniforms seeded. Emitted token j of a
  sequence is draft_tokens[b, j] when n_accepted > j and next_token when n_accepted == j; over the
  M_j sequences that reach position j (n_accepted >= j) it must be distributed as target_probs[., j]
  (for j = 0 unconditionally; for j = 1, 2 given the earlier drafts accepted, which the method also
  guarantees, the draft tokens being independent across positions). M_0 = 4000, M_1 ~ 2400, M_2 ~ 1080.
- For each j, Pearson's statistic X_j = sum_v (count_v - M_j p_jv)^2 / (M_j p_jv). For a correct
  file (which makes the reference's decisions on every row) X_j is asymptotically chi-square with
  V - 1 = 5 degrees of freedom; every expected count is at least 0.05 * 1080 = 54, where the
  approximation is good. P(chi2_5 > 70) = 1.0e-13, so with the three statistics a correct file
  fails at fewer than 1 seed in 10^12. The uniforms kept 1e-4 from the boundaries (the contract:
  at most 15 boundaries per uniform, so at most 3e-3 of its range is redrawn) move each outcome's
  probability by at most 2e-4 + 3e-3 * 0.3 < 1.1e-3, which adds at most N * 6 * (1.1e-3)^2 / 0.05 < 0.6
  to the expected statistic. Measured over 300 seeds of cases.stat_case, the reference's largest X_j
  was 20.7.
- A known mistake changes some emitted token's distribution to p' != p: X_j is then non-central
  chi-square with non-centrality ~ M_j * sum (p' - p)^2 / p. The closest mistakes (sampling the
  target instead of the residual; all accepted counted as 0; reusing the rejecting uniform) have
  a non-centrality of about 370 at N = 4000, a mean near 375 and a standard deviation near 39: the
  bound 70 is 7.8 standard deviations below, and over the same 300 seeds their smallest statistic was 259.
  Every other mistake is far beyond (a -1 token or a token past V fails before the statistic).
  So the verdict of every file of the corpus is the same at every seed.
"""

from __future__ import annotations

import pytest
import torch

from lumen_ex.author import CheckFailed, Expected, Tolerance, exercise, expect, fail, meta, pictures, sibling

ref = exercise(__file__).reference
variants = exercise(__file__).mistakes
cases = sibling(__file__, "suite/cases")

FN = "speculative_verify"
PARAMS = ("draft_tokens", "draft_probs", "target_probs", "uniforms")
OUTPUTS = ("n_accepted", "next_token")
AXES = ("B",)
EXACT = Tolerance(0.0, 0.0)

# The plans: per sequence, the position of its first rejected draft, or None when all K are accepted.
# Sizes all distinct: B, K, K + 1 and V.
ALL_ACCEPTED = dict(plan=(None,) * 6, K=4, V=9)
FIRST_REJECTED = dict(plan=(0,) * 6, K=4, V=9)
MIDDLE_REJECTED = dict(plan=(1, 2, 3, 1, 2, 3), K=4, V=9)
ONE_DRAFT = dict(plan=(None, 0, None, 0, 0), K=1, V=7)
MIXED = dict(plan=(None, 0, 1, 2, 3, 4) * 2, K=5, V=11)
# The dtype tests: few tokens and drafts, so that the half-precision margin (cases.MARGIN) fits.
DTYPE_PLAN = dict(plan=(None, 0, 1, 0, None, 1, 0), K=2, V=4)

CHI2_BOUND = 70.0            # P(chi2_5 > 70) = 1.0e-13: see the module's docstring


def case_for(seed: int, spec: dict, dtype: torch.dtype = torch.float32):
    return cases.build(seed, spec["plan"], K=spec["K"], V=spec["V"], dtype=dtype)


def call(submission, args, *, device="cpu", **options):
    """Call the learner's speculative_verify: the CallResult and its (n_accepted, next_token)."""
    with expect.exceptions_named([]):
        result = submission.call(FN, tuple(args), device=device, **options)
    return result, expect.returns(result.value, OUTPUTS, FN)


def _dt(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def check_kinds(got, sizes: dict, device: str) -> None:
    """Both outputs are tensors of shape (B,), int64, on the inputs' device."""
    n, nxt = got
    items = [Expected(n, torch.zeros(sizes["B"], dtype=torch.int64), "n_accepted", AXES),
             Expected(nxt, torch.zeros(sizes["B"], dtype=torch.int64), "next_token", AXES)]
    for it in items:
        it.got = expect.is_tensor(it.got, it.what)
    expect.shapes(items, sizes=sizes)
    for it in items:
        if it.got.dtype != torch.int64:
            raise fail("dtype", f"{it.what} has dtype {_dt(it.got.dtype)}; it must be int64 whatever the inputs' "
                       "dtype", expected="int64", got=_dt(it.got.dtype), misconception="counts-not-int64",
                       hint="Counts and token ids are integers: accepted.long().cumprod(-1).sum(-1) and "
                            "(cdf <= u).sum(-1) are int64 already; a float cumprod, .float() or .int() is not. "
                            "Cast with .long() if you must.")
    for it in items:
        where = meta(it.got).device
        if where.split(":")[0] != device.split(":")[0]:
            raise fail("device", f"{it.what} is on {where}; the inputs were on {device}", expected=device, got=where,
                       hint="Create new tensors with device=draft_probs.device (torch.arange(..., device=...)).")


def acceptance(n: torch.Tensor, K: int) -> torch.Tensor:
    """(B, K) bool: True where draft i of sequence b is accepted as n_accepted says (i < n[b]).
    Drawn as a mask whose True reads "accepted" (the picture's ``on``), not "may attend"."""
    return torch.arange(K)[None, :] < n.detach().to("cpu", torch.int64)[:, None]   # (B, K)


def _row_story(case, b: int) -> str:
    """Where sequence b's next token comes from, in words."""
    r, K = case.plan[b], case.sizes["K"]
    if r is None:
        return (f"sequence {b} accepts all {K} drafts, so its next token is the bonus token, sampled from "
                f"target_probs[{b}, {K}] with uniforms[{b}, {K}]")
    return (f"sequence {b} rejects draft {r} first, so its next token is sampled from "
            f"norm(max(0, target_probs[{b}, {r}] - draft_probs[{b}, {r}])) with uniforms[{b}, {K}]")


def check_values(got, case, *, device: str) -> None:
    """The staged checks: kinds, then n_accepted exactly, then next_token exactly."""
    sizes = case.sizes
    check_kinds(got, sizes, device)
    n, nxt = got
    exp_n, exp_next = ref.speculative_verify(*case.fresh())
    K = sizes["K"]
    try:
        expect.tensors([Expected(n, exp_n, "n_accepted", AXES,
                                 lambda: variants.verify_variants(*case.fresh(), which=variants.N_ACCEPTED), EXACT)],
                       sizes=sizes, dtype=torch.int64, device=device)
    except CheckFailed as exc:
        diag = exc.diagnosis
        diag.details["first_rejection"] = list(case.plan)
        if diag.kind == "values":
            pictures.attach(exc, acceptance(n, K), acceptance(exp_n, K), what="accepted drafts",
                            axes=("B", "K"), rows="sequences", cols="positions", on="accepted")
            if not diag.misconception:
                b = int((diag.details.get("index") or [0])[0])
                r = case.plan[b]
                diag.hint = (f"sequence {b} should accept {int(exp_n[b])} draft(s): "
                             + (f"drafts 0..{r - 1} pass u <= min(1, p/q) and draft {r} fails it" if r
                                else "draft 0 fails u <= min(1, p/q)" if r == 0 else "every draft passes u <= min(1, p/q)")
                             + ". Count the accepted prefix: stop at the first rejection.")
        raise
    try:
        expect.tensors([Expected(nxt, exp_next, "next_token", AXES,
                                 lambda: variants.verify_variants(*case.fresh(), which=variants.NEXT_TOKEN), EXACT)],
                       sizes=sizes, dtype=torch.int64, device=device)
    except CheckFailed as exc:
        diag = exc.diagnosis
        diag.details["first_rejection"] = list(case.plan)
        if diag.kind == "values" and not diag.misconception:
            b = int((diag.details.get("index") or [0])[0])
            diag.hint = (_row_story(case, b) + ": the smallest j with cumsum(probs)[j] > u, "
                         "which (cumsum(probs) <= u).sum(-1) counts.")
        raise


def check_case(submission, case, *, dtype=torch.float32, device="cpu", **options):
    """The learner's (n_accepted, next_token) on ``case`` must equal the reference's."""
    result, got = call(submission, case.args(dtype), device=device, **options)
    check_values(got, case, device=device)
    return result


# -------------------------------------------------------------------------------------------------
# The contract


@pytest.mark.group("contract")
def test_signature(submission):
    """speculative_verify has the stub's parameters"""
    expect.signature(submission, FN, PARAMS)


@pytest.mark.group("contract")
def test_returns_two_tensors(submission, seed, device):
    """returns (n_accepted, next_token)"""
    call(submission, case_for(seed, MIXED).args(torch.float32), device=device)


# -------------------------------------------------------------------------------------------------
# Shapes


@pytest.mark.group("shapes")
def test_shapes(submission, seed, device):
    """n_accepted (B,), next_token (B,), both int64"""
    case = case_for(seed, MIXED)
    _, got = call(submission, case.args(torch.float32), device=device)
    check_kinds(got, case.sizes, device)


# -------------------------------------------------------------------------------------------------
# Values


@pytest.mark.group("values")
def test_all_accepted(submission, seed, device):
    """every draft accepted: n_accepted = K and a bonus token from target_probs[:, K]"""
    check_case(submission, case_for(seed, ALL_ACCEPTED), device=device)


@pytest.mark.group("values")
def test_first_rejected(submission, seed, device):
    """the first draft rejected: n_accepted = 0 and a token from the residual"""
    check_case(submission, case_for(seed, FIRST_REJECTED), device=device)


@pytest.mark.group("values")
def test_middle_rejected(submission, seed, device):
    """a draft in the middle rejected, later ones that would pass"""
    check_case(submission, case_for(seed, MIDDLE_REJECTED), device=device)


@pytest.mark.group("values")
def test_one_draft(submission, seed, device):
    """K = 1: one draft per sequence"""
    check_case(submission, case_for(seed, ONE_DRAFT), device=device)


@pytest.mark.group("values")
def test_mixed_batch(submission, seed, device):
    """a batch with every outcome, from all accepted to the first rejected"""
    check_case(submission, case_for(seed, MIXED), device=device)


# -------------------------------------------------------------------------------------------------
# The distribution of the emitted tokens


def _emitted(n: torch.Tensor, nxt: torch.Tensor, tokens: torch.Tensor, j: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Emitted token j of every sequence that reaches it (n_accepted >= j), and which rows those are."""
    K = tokens.shape[1]
    reach = n >= j                                                                  # (N,)
    drafted = tokens[:, min(j, K - 1)]                                              # (N,)
    tok = torch.where(n > j, drafted, nxt) if j < K else nxt
    return tok[reach], reach


@pytest.mark.group("distribution")
def test_emits_target_distribution(submission, seed, device):
    """the emitted tokens are distributed as the target's (chi-square over 4000 sequences)"""
    case = cases.stat_case(seed)
    sizes = case.sizes
    K, V, N = sizes["K"], sizes["V"], sizes["B"]
    _, got = call(submission, case.args(torch.float32), device=device)
    check_kinds(got, sizes, device)
    n = got[0].to("cpu", torch.int64)
    nxt = got[1].to("cpu", torch.int64)
    hint = ("Run your function on one batch of many sequences that share one pair of distributions: the drafts "
            "it keeps, followed by its next token, must be distributed as target_probs. Check the ratio p/q, the "
            "residual norm(max(0, p - q)) and the bonus token from target_probs[b, K].")
    if bool(((n < 0) | (n > K)).any()):
        bad = int(n[(n < 0) | (n > K)][0])
        raise fail("property", f"n_accepted must lie in 0..K = 0..{K}; yours has {bad}", hint=hint)
    target = torch.tensor(cases.STAT_P, dtype=torch.float64)                       # (K + 1, V)
    freq = torch.zeros(K + 1, V, dtype=torch.float64)                               # (K + 1, V)
    stats, reached = [], []
    for j in range(K + 1):
        tok, reach = _emitted(n, nxt, case.draft_tokens, j)
        outside = (tok < 0) | (tok >= V)
        if bool(outside.any()):
            raise fail("property", f"next_token must be a token id in 0..V-1 = 0..{V - 1}; yours gives "
                       f"{int(tok[outside][0])} for {int(outside.sum())} of the {int(reach.sum())} sequences whose "
                       f"next token is emitted token {j}", hint=hint)
        M = int(reach.sum())
        counts = torch.bincount(tok, minlength=V).to(torch.float64)                 # (V,)
        expected = M * target[j]
        stats.append(float(((counts - expected) ** 2 / expected).sum()))
        reached.append(M)
        freq[j] = counts / max(M, 1)
    worst = max(range(K + 1), key=lambda j: stats[j])
    if stats[worst] > CHI2_BOUND:
        failure = fail("property", f"the tokens you emit are not distributed as the target's: emitted token {worst}, "
                       f"over the {reached[worst]} of {N} sequences that reach it, gives a chi-square of "
                       f"{stats[worst]:.1f} against target_probs[:, {worst}] (a correct verification stays below "
                       f"{CHI2_BOUND:.0f} at all but 1 seed in 10^12)",
                       expected=f"chi-square <= {CHI2_BOUND:.0f}", got=round(stats[worst], 1), hint=hint,
                       details={"chi_square": [round(s, 1) for s in stats], "sequences": reached,
                                "degrees_of_freedom": V - 1})
        raise pictures.attach(failure, freq, target, what="emitted token frequencies", axes=("position", "token"),
                              atol=0.03, rtol=0.0, rows="positions", cols="tokens")


# -------------------------------------------------------------------------------------------------
# The caller's inputs


@pytest.mark.group("inputs")
def test_inputs_unchanged(submission, seed, device):
    """the drafted tokens, probabilities and uniforms are not modified"""
    case = case_for(seed, MIXED)
    sent = case.args(torch.float32)
    result, _ = call(submission, sent, device=device, echo_args=True)
    after = result.args_after
    if not isinstance(after, tuple) or len(after) != len(sent):
        raise fail("protocol", "the worker did not send the arguments back after the call")
    for name, before, now in zip(PARAMS, sent, after):
        if (not isinstance(now, torch.Tensor) or now.shape != before.shape or now.dtype != before.dtype
                or not torch.equal(now, before)):
            if name in ("draft_probs", "target_probs"):
                hint = ("Compute the residual out of place, torch.clamp(p - q, min=0) / its sum: sub_, clamp_, "
                        f"div_, -= or /= on a slice of {name} write into the caller's tensor, which the serving "
                        "loop still uses.")
            else:
                hint = (f"Leave {name} as it was given: an in-place edit of a slice (x[...] = , +=, add_) writes "
                        "into the caller's tensor. Work on a copy, or out of place.")
            raise fail("side-effect", f"speculative_verify changed the caller's {name} in place",
                       misconception="argument-mutated", hint=hint)


@pytest.mark.group("inputs")
def test_noncontiguous_inputs(submission, seed, device):
    """non-contiguous inputs (transposed, sliced views)"""
    check_case(submission, case_for(seed, MIXED), device=device, noncontiguous=True)


# -------------------------------------------------------------------------------------------------
# Dtypes


@pytest.mark.group("dtypes")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16], ids=["float64", "float16", "bfloat16"])
def test_dtype(submission, seed, device, dtype):
    """float64 and half-precision probabilities: the same decisions, int64 outputs"""
    check_case(submission, case_for(seed, DTYPE_PLAN, dtype), dtype=dtype, device=device)


# -------------------------------------------------------------------------------------------------
# CUDA (worth no points: not every machine has a GPU)


@pytest.mark.group("cuda")
def test_cuda(submission, seed, cuda):
    """runs on the GPU"""
    check_case(submission, case_for(seed, MIXED), device=cuda)

"""How close float32-inside code comes to the float64 reference, and how far the known mistakes are.

    .venv/bin/python bench/float32_margin.py [--seeds 300]

The float64 value checks accept a result within the float32 tolerance (src/lumen_ex/graders/support/expect.py
TOLERANCES, docs/tolerances.md), so that code that computes in float32 and casts back (the habit of
llama-style code: ``softmax(scores.float(), dim=-1).type_as(q)``) passes at every seed. This script
measures, on the hidden tests' own float64 inputs and over many seeds:

- the worst error of float32-inside code, in units of the float64 tolerance (atol + rtol |expected|):
  it must stay far below 1;
- the smallest error of float32-inside code in units of the float64-arithmetic bound
  (FLOAT64_ARITHMETIC): it must stay far above 1, so the note it gets never depends on the seed;
- the closest known mistake (src/lumen_ex/graders/*/variants.py), in units of the float64 tolerance: far above 1;
- the gradient check's worst error for float32-inside code, in units of its tolerance;
- the worst error of float16 and bfloat16 arithmetic in test_dtype, in units of their tolerances.
"""

from __future__ import annotations

import argparse
import math

import torch

from lumen_ex.core import catalog, exercise_modules
from lumen_ex.graders.support import expect, inputs

_EX = {ex.suite: ex for ex in catalog.load().exercises}
ta = exercise_modules.load(_EX["attention"].suite_dir, "test_attention")
tk = exercise_modules.load(_EX["kv_cache"].suite_dir, "test_kv_cache")
output_variants = exercise_modules.load(_EX["attention"].root, "mistakes").output_variants
step_variants = exercise_modules.load(_EX["kv_cache"].root, "mistakes").step_variants
ref_att = exercise_modules.load(_EX["attention"].root, "reference")
ref_kv = exercise_modules.load(_EX["kv_cache"].root, "reference")


def attention_float32_inside(q, k, v, mask=None):
    """softmax in float32, cast back: (..., L_q, d_v) and (..., L_q, L_k) in q's dtype."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))           # (..., L_q, L_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores.float(), dim=-1).type_as(q)          # (..., L_q, L_k)
    return weights @ v, weights


def attention_all_float32(q, k, v, mask=None):
    """Everything in float32, cast back at the end."""
    out, w = ref_att.scaled_dot_product_attention(q.float(), k.float(), v.float(), mask)
    return out.to(q.dtype), w.to(q.dtype)


def decode_all_float32(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    """decode_step computed in float32, the three results cast back."""
    args = [t.float() for t in (x_t, k_cache, v_cache, w_q, w_k, w_v, w_o)]
    return tuple(t.to(x_t.dtype) for t in ref_kv.decode_step(*args, n_heads))


def ratio(got, want, tol: expect.Tolerance) -> float:
    """The largest |got - want| / (atol + rtol |want|)."""
    return expect.separation(got.to(torch.float64), want, tol)


def measure(seeds: int) -> dict[str, float]:
    tol64, exact = expect.TOLERANCES[torch.float64], expect.FLOAT64_ARITHMETIC
    worst, least, closest, grad, low = 0.0, math.inf, math.inf, 0.0, {}
    for seed in range(seeds):
        case = inputs.attention_case(seed, mask="full", bound=inputs.DTYPE_BOUND, **ta.DTYPE_SIZES)
        want = ref_att.scaled_dot_product_attention(case.q, case.k, case.v, case.mask)
        for fn in (attention_float32_inside, attention_all_float32):
            got = fn(case.q, case.k, case.v, case.mask)
            worst = max(worst, *(ratio(g, w, tol64) for g, w in zip(got, want)))
            least = min(least, max(ratio(g, w, exact) for g, w in zip(got, want)))
        for which in (0, 1):
            closest = min(closest, nearest_mistake(
                output_variants(case.q, case.k, case.v, case.mask, which=which, dtype=torch.float64), want[which]))
        dcase = inputs.decode_case(seed, bound=inputs.DTYPE_BOUND, **tk.DTYPE_SIZES)
        dwant = ref_kv.decode_step(*dcase.tensors(), dcase.n_heads)
        dgot = decode_all_float32(*dcase.tensors(), dcase.n_heads)
        worst = max(worst, *(ratio(g, w, tol64) for g, w in zip(dgot, dwant)))
        least = min(least, max(ratio(g, w, exact) for g, w in zip(dgot, dwant)))
        for which in (0, 1, 2):
            closest = min(closest, nearest_mistake(step_variants(*dcase.tensors(), dcase.n_heads, which=which),
                                                   dwant[which]))
        grad = max(grad, gradient_ratio(seed))
        for dtype in (torch.float16, torch.bfloat16):
            low[dtype] = max(low.get(dtype, 0.0), low_precision_ratio(seed, dtype))
    return {"float32_inside_worst": worst, "float32_inside_least_vs_float64_bound": least,
            "closest_mistake": closest, "gradient_worst": grad,
            "float16_worst": low[torch.float16], "bfloat16_worst": low[torch.bfloat16]}


def low_precision_ratio(seed: int, dtype: torch.dtype) -> float:
    """test_dtype[float16 / bfloat16] on the reference computed in ``dtype``: its worst error over
    the tolerance, on the tests' own inputs (bounded, the reference fed the rounded inputs)."""
    tol = expect.TOLERANCES[dtype]
    case = inputs.attention_case(seed, mask="full", bound=inputs.DTYPE_BOUND, **ta.DTYPE_SIZES).rounded(dtype)
    got = ref_att.scaled_dot_product_attention(*case.cast(dtype), case.mask)
    want = ref_att.scaled_dot_product_attention(case.q, case.k, case.v, case.mask)
    dcase = inputs.decode_case(seed, bound=inputs.DTYPE_BOUND, **tk.DTYPE_SIZES).rounded(dtype)
    dgot = ref_kv.decode_step(*dcase.args(dtype))
    dwant = ref_kv.decode_step(*dcase.tensors(), dcase.n_heads)
    return max(ratio(g, w, tol) for g, w in [*zip(got, want), *zip(dgot, dwant)])


def nearest_mistake(variants, want) -> float:
    """The distance of the closest mistake that changes this value, in float64 tolerances (a
    mistake that gives the reference's answer here, such as returning the scores in place of the
    weights for the output, is compared where it does change a value: expect.candidates)."""
    cands = expect.candidates(want, variants, expect.MATCH_TOLERANCE_FLOAT64)
    return min((ratio(var.value, want, expect.TOLERANCES[torch.float64]) for var in cands), default=math.inf)


def gradient_ratio(seed: int) -> float:
    """test_gradients_flow on float32-inside code: its worst gradient error over the tolerance."""
    case = inputs.attention_case(seed, mask="full", **ta.GRADIENT_SIZES)
    gen = inputs.generator(seed + 7)
    q, k, v = (t.clone().requires_grad_() for t in (case.q, case.k, case.v))
    out, w = ref_att.scaled_dot_product_attention(q, k, v, case.mask)
    g_out, g_w = inputs.randn(gen, *out.shape), inputs.randn(gen, *w.shape)
    want = torch.autograd.grad((out * g_out).sum() + (w * g_w).sum(), (q, k, v))
    out2, w2 = attention_float32_inside(q, k, v, case.mask)
    got = torch.autograd.grad((out2 * g_out).sum() + (w2 * g_w).sum(), (q, k, v))
    tol = expect.GRADIENT_TOLERANCE
    return max(float((g - e).abs().max()) / (tol + tol * float(e.abs().max())) for g, e in zip(got, want))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=300)
    args = parser.parse_args()
    for name, value in measure(args.seeds).items():
        print(f"{name:40} {value:.3g}")


if __name__ == "__main__":
    main()

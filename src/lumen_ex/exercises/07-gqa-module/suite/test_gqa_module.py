"""Hidden suite for exercise 7: GroupedQueryAttention, an nn.Module graded as a class.

Every test builds the learner's module in the sandboxed worker through ``ModuleCall``: constructed
with the test's sizes, moved with ``.to(dtype)`` and ``.to(device)``, loaded with the reference's
weights by ``load_state_dict(strict=True)`` (so names and shapes must match), then called on x. The
expected output is the reference module's with the same weights, in float64, computed before the
call. The docstring's first line is what the learner sees as the test's name.

Axis names in feedback: B batch, L tokens, d_model the model width.
"""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch

from lumen_ex.author import (
    CheckFailed,
    Expected,
    LearnerError,
    ModuleCall,
    exercise,
    expect,
    fail,
    inputs,
    pictures,
    sibling,
)

mistakes = exercise(__file__).mistakes
cases = sibling(__file__, "suite/cases")

FN = "GroupedQueryAttention"
INIT_PARAMS = ("d_model", "n_heads", "n_kv_heads")
AXES = ("B", "L", "d_model")
NAMES = cases.NAMES
LAYOUT_NAMES = {"gqa": "grouped-query (GQA)", "mha": "multi-head (MHA)", "mqa": "multi-query (MQA)"}

# Sizes __init__ must refuse with ValueError (the contract's three conditions).
BAD_SIZES = [((24, 6, 0), "n_kv_heads < 1"), ((24, 6, 4), "n_heads % n_kv_heads != 0"),
             ((26, 6, 2), "d_model % n_heads != 0")]


def _load_error(exc: LearnerError) -> bool:
    return "Error(s) in loading state_dict" in exc.message


# A strict load that fails says why in its message: which keys are missing, unexpected or of another
# shape. (misconception, sentence, predicate), first match wins.
LOAD_ERRORS = [
    ("kv-projected-to-d-model", "the grader loads the reference's weights with load_state_dict(strict=True), and "
     "your k_proj or v_proj has another shape: they map d_model to n_kv_heads * d_head, not to d_model",
     lambda e: _load_error(e) and bool(re.search(r"size mismatch for [kv]_proj\.weight", e.message))),
    ("projection-bias", "the grader loads the reference's weights with load_state_dict(strict=True), and your "
     "projections have biases it does not have: nn.Linear(..., bias=False)",
     lambda e: _load_error(e) and bool(re.search(r"Missing key\(s\)[^\n]*_proj\.bias", e.message))
     and "Unexpected key(s)" not in e.message),
    ("params-not-registered", "the grader loads the reference's weights with load_state_dict(strict=True), and "
     "your module has none of q_proj, k_proj, v_proj, o_proj as registered layers: create them in __init__ as "
     "attributes, self.q_proj = nn.Linear(...) (a plain tensor, a Python list or a layer made in forward is not "
     "a parameter of the module)",
     lambda e: _load_error(e) and "Unexpected key(s)" in e.message and "Missing key(s)" not in e.message),
    ("param-names-differ", "the grader loads the reference's weights with load_state_dict(strict=True), and your "
     "layers have other names: call them exactly q_proj, k_proj, v_proj and o_proj",
     lambda e: _load_error(e) and "Unexpected key(s)" in e.message and "Missing key(s)" in e.message),
]


def run(submission, case, *, dtype=torch.float32, device="cpu", args=None, kwargs=None, state=True,
        param_grads=(), **options):
    """Build the learner's module for ``case`` in the worker (weights loaded unless ``state`` is False),
    call it on x (as ``args``/``kwargs`` when given) and return the CallResult and its output."""
    spec = ModuleCall(case.init_args, dtype=dtype, state_dict=case.state_as(dtype) if state else None,
                      param_grads=param_grads)
    x = case.x.to(dtype)
    with expect.exceptions_named(LOAD_ERRORS):
        result = submission.call(FN, (x,) if args is None else args, kwargs or {}, device=device, module=spec,
                                 **options)
    return result, expect.is_tensor(result.value, "y")


def check(submission, case, *, causal=None, dtype=torch.float32, device="cpu", picture=False, **options):
    """The learner's y must match the reference module's, with the known mistakes named."""
    expected = case.expected(True if causal is None else causal)         # (B, L, d_model), before the call
    kwargs = {} if causal is None else {"causal": causal}
    result, y = run(submission, case, dtype=dtype, device=device, kwargs=kwargs, **options)
    variants = lambda: mistakes.output_variants(case.x, case.state, case.sizes["n_heads"],   # noqa: E731
                                                 case.sizes["n_kv_heads"], True if causal is None else causal)
    try:
        expect.tensors([Expected(y, expected, "y", AXES, variants)], sizes=case.axis_sizes, dtype=dtype,
                       device=device)
    except CheckFailed as exc:
        if picture and exc.diagnosis.kind in ("values", "nonfinite"):
            # Rows are tokens: a mask mistake shows as whole rows wrong (the first token, or all but the last).
            pictures.attach(exc, y[0], expected[0], what="y[0]", axes=("L", "d_model"), rows="tokens",
                            cols="features", kind="values")
        raise
    return result, y


# -------------------------------------------------------------------------------------------------
# The contract


@pytest.mark.group("contract")
def test_signature(submission):
    """GroupedQueryAttention(d_model, n_heads, n_kv_heads)"""
    expect.signature(submission, FN, INIT_PARAMS)


@pytest.mark.group("contract")
def test_rejects_bad_sizes(submission):
    """__init__ raises ValueError for impossible sizes"""
    hint = ("Check the sizes at the top of __init__ and raise ValueError(...) for each: n_kv_heads < 1, "
            "n_heads % n_kv_heads != 0, d_model % n_heads != 0 (not assert, which raises AssertionError).")
    for args, what in BAD_SIZES:
        call = f"GroupedQueryAttention{args} ({what})"
        try:
            submission.call(FN, (), module=ModuleCall(args, method=None))
        except LearnerError as exc:
            if exc.type == "ValueError":
                continue
            raise fail("property", f"{call} raised {exc.type}, not ValueError", expected="ValueError",
                       got=exc.type, hint=hint, misconception="sizes-not-validated") from None
        raise fail("property", f"{call} was built without an error: it must raise ValueError",
                   expected="ValueError", got="a module", hint=hint, misconception="sizes-not-validated")


def _numel(shapes) -> int:
    return sum(math.prod(s) for s in shapes)


@pytest.mark.group("parameters")
def test_parameters(submission):
    """q_proj, k_proj, v_proj, o_proj with the contract's shapes (GQA, MHA, MQA)"""
    # The module's named_parameters() as the worker describes them (a claim: it can only fail this
    # test; the strict load of every other test is the proof that names and shapes match).
    for layout, s in cases.LAYOUTS.items():
        args = (s["d_model"], s["n_heads"], s["n_kv_heads"])
        result = submission.call(FN, (), module=ModuleCall(args, method=None, describe=True))
        got = {p.name: p.shape for p in result.parameters or []}
        want = cases.reference_parameters(layout)
        _check_parameters(got, result.parameter_count or 0, want, s, f"your {LAYOUT_NAMES[layout]} module "
                          f"GroupedQueryAttention{args}")


def _check_parameters(got: dict, count: int, want: dict, s: dict, module: str) -> None:
    d_model, d_head = s["d_model"], s["d_model"] // s["n_heads"]
    sizes = (f"{_numel(got.values())} parameters in {count} tensor{'s' if count != 1 else ''}; the contract's has "
             f"{_numel(want.values())} in 4")
    listed = [f"{n} {tuple(sh)}" for n, sh in list(got.items())[:8]]
    if count == 0:
        raise fail("property", f"{module} has no parameters at all", expected=[f"{n} {w}" for n, w in want.items()],
                   got=[], misconception="params-not-registered",
                   hint="Create the layers in __init__ as attributes of self: self.q_proj = nn.Linear(d_model, "
                        "n_heads * d_head, bias=False). A plain tensor attribute, a layer kept in a Python list "
                        "or one created in forward is not a parameter of the module.")
    extra = [n for n in got if n not in want]
    if extra and all(n.endswith(".bias") and n[: -len(".bias")] + ".weight" in want for n in extra):
        raise fail("property", f"{module} has biases: {', '.join(extra)} ({sizes})", expected=list(want),
                   got=listed, misconception="projection-bias",
                   hint="nn.Linear adds a bias unless told not to: nn.Linear(d_model, n_heads * d_head, bias=False).")
    if set(got) != set(want):
        missing = [n for n in want if n not in got]
        raise fail("property", f"{module} has parameters named {', '.join(list(got)[:6])}; the contract's are "
                   f"{', '.join(want)}" + (f" ({', '.join(missing)} missing)" if missing else ""),
                   expected=list(want), got=listed, misconception="param-names-differ",
                   hint="Name the four layers exactly self.q_proj, self.k_proj, self.v_proj and self.o_proj: the "
                        "grader loads a state_dict with those names.")
    for name, shape in want.items():
        if got[name] == shape:
            continue
        named = None
        if name in ("k_proj.weight", "v_proj.weight") and got[name] == (d_model, d_model):
            named = "kv-projected-to-d-model"
        hint = (f"k_proj and v_proj map d_model = {d_model} to n_kv_heads * d_head = {shape[0]} (nn.Linear's weight "
                f"is (out, in)): keys and values have only n_kv_heads heads, which is what makes GQA's cache "
                f"small." if named else f"nn.Linear(in, out) holds a weight of shape (out, in); d_head = d_model // "
                f"n_heads = {d_head}.")
        raise fail("shape", f"{module}: {name} is {tuple(got[name])}, expected {shape} ({sizes})",
                   expected=list(shape), got=list(got[name]), misconception=named, hint=hint,
                   details={"parameter": name})


# -------------------------------------------------------------------------------------------------
# Shapes


@pytest.mark.group("shapes")
def test_shapes(submission, seed, device):
    """y is (B, L, d_model)"""
    case = cases.case(seed)
    _, y = run(submission, case, device=device)
    expect.shapes([Expected(y, case.expected(), "y", AXES)], sizes=case.axis_sizes)


# -------------------------------------------------------------------------------------------------
# Values


@pytest.mark.group("values")
@pytest.mark.parametrize("layout", ["gqa", "mha", "mqa"])
def test_values(submission, seed, device, layout):
    """y matches the reference (causal by default)"""
    check(submission, cases.case(seed, layout), device=device, picture=True)


@pytest.mark.group("values")
def test_noncontiguous_input_unchanged(submission, seed, device):
    """a non-contiguous x, passed positionally, left unchanged"""
    case = cases.case(seed)
    x = case.x.to(torch.float32)
    result, _ = check(submission, case, device=device, args=(x, True), noncontiguous=True, echo_args=True)
    after = result.args_after
    if not isinstance(after, tuple) or len(after) != 2:
        raise fail("protocol", "the worker did not send the arguments back after the call")
    if not isinstance(after[0], torch.Tensor) or after[0].shape != x.shape or not torch.equal(after[0], x):
        raise fail("side-effect", "forward changed the caller's x in place",
                   hint="Use out-of-place operations on x (x = x * s, not x *= s).")


# -------------------------------------------------------------------------------------------------
# causal=False


@pytest.mark.group("causal")
def test_not_causal(submission, seed, device):
    """causal=False: every token attends to every token"""
    check(submission, cases.case(seed), causal=False, device=device, picture=True)


# -------------------------------------------------------------------------------------------------
# Gradients


@pytest.mark.group("gradients")
def test_gradients(submission, seed, device):
    """gradients reach x and every parameter"""
    case = cases.case(seed)
    g = inputs.randn(inputs.generator(seed + 7), *case.x.shape)          # (B, L, d_model)
    module = case.module()
    x = case.x.clone().requires_grad_(True)
    params = dict(module.named_parameters())
    expected = torch.autograd.grad((module(x) * g).sum(), (x, *(params[n] for n in NAMES)))
    result, _ = check(submission, case, dtype=torch.float64, device=device, grad_wrt=(0,), grad_seeds=(g,),
                      param_grads=NAMES)
    grads = result.param_grads or {}
    for name in NAMES:
        if not result.grad_error and result.grads is not None and grads.get(name) is None:
            skipped = name == "o_proj.weight"
            raise fail("property", f"no gradient reaches {name}: the output does not depend on it",
                       misconception="o-proj-skipped" if skipped else "no-gradient",
                       hint="End forward with self.o_proj(...) on the merged heads." if skipped else
                       f"Use self.{name.split('.')[0]} in forward, and do not cut the graph (.detach(), .data, "
                       "torch.no_grad()).")
    full = dataclasses.replace(result, grads=(*(result.grads or ()), *(grads.get(n) for n in NAMES)))
    expect.gradients(full, expected, ("x", *NAMES))


# -------------------------------------------------------------------------------------------------
# Dtypes and devices


@pytest.mark.group("dtypes")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16], ids=["float64", "float16", "bfloat16"])
def test_dtype(submission, seed, device, dtype):
    """a module moved with .to(dtype) keeps that dtype"""
    # Bounded x, and the reference computed from x and the weights as rounded to ``dtype``: what is left
    # is the learner's arithmetic, well inside the tolerance at every seed (docs/tolerances.md).
    check(submission, cases.case(seed, bound=inputs.DTYPE_BOUND).rounded(dtype), dtype=dtype, device=device)


@pytest.mark.group("dtypes")
def test_runs_on_meta(submission, seed):
    """a module moved with .to(device) works there (checked on meta)"""
    # The module and x on meta (shapes, dtypes and devices, no data): a mask made without device=
    # meets the scores in one operation and torch raises (named "new-tensor-device"), as on a GPU.
    case = cases.case(seed)
    _, y = run(submission, case, device="meta", state=False)
    expect.tensors([Expected(y, case.expected(), "y", AXES)], sizes=case.axis_sizes, dtype=torch.float32,
                   device="meta")


# -------------------------------------------------------------------------------------------------
# CUDA (worth no points: not every machine has a GPU)


@pytest.mark.group("cuda")
def test_cuda(submission, seed, cuda):
    """a module moved to the GPU"""
    check(submission, cases.case(seed), device=cuda)

"""Hidden suite for exercise 14: flash_attention_kernel, FlashAttention's forward pass as a Triton kernel.

The grader launches the learner's kernel itself (src/lumen_ex/harness/kernels.py), over the grid
(cdiv(L_q, BLOCK_M), H), on tensors it sends: Out and Lse filled with NaN first, so a row the kernel's
stores never wrote shows. On the CPU it runs in Triton's interpreter. Every expected value is the
float64 softmax attention of the inputs as sent (rounded to the dtype under test), computed before the
launch. Inputs are (H, L, D) with batch and heads flattened into H, contiguous.

Axis names in feedback: H heads, L_q queries, L_k keys, D the head width.
"""

from __future__ import annotations

import math
from textwrap import shorten

import pytest
import torch

from lumen_ex.author import (
    CheckFailed,
    Expected,
    LearnerError,
    Tolerance,
    WorkerFailure,
    exercise,
    expect,
    fail,
    inputs,
    kernels,
)

mistakes = exercise(__file__).mistakes

KERNEL = "flash_attention_kernel"
PARAMS = ("Q", "K", "V", "Out", "Lse", "stride_qh", "stride_qm", "stride_kh", "stride_kn", "stride_vh",
          "stride_vn", "stride_oh", "stride_om", "stride_lh", "L_q", "L_k", "scale", "D", "BLOCK_M", "BLOCK_N",
          "CAUSAL")
# The argument types for a compile (the IR test): float32 pointers, 32-bit sizes and strides, a float scale.
SIGNATURE = {**{p: "*fp32" for p in PARAMS[:5]}, **{p: "i32" for p in PARAMS[5:16]}, "scale": "fp32",
             **{p: "constexpr" for p in PARAMS[17:]}}
# D differs from BLOCK_N, so that K not transposed cannot compile by chance.
IR_CONSTANTS = {"D": 16, "BLOCK_M": 32, "BLOCK_N": 32, "CAUSAL": True}
OUT_AXES, LSE_AXES = ("H", "L_q", "D"), ("H", "L_q")
# On a GPU, tl.dot of float32 blocks uses TF32 unless told otherwise: about 1e-3 of relative error.
GPU_FLOAT32 = Tolerance(3e-3, 3e-3)


def _k_not_transposed(exc: LearnerError) -> bool:
    """tl.dot refused the shapes: K was loaded (BLOCK_N, D) and not transposed to (D, BLOCK_N)
    (Triton 3.9: "input and other must have equal reduction dimensions")."""
    text = exc.message.lower()
    return "reduction dimension" in text or ("dot" in text and ("shape" in text or "incompatible" in text))


NAMED_EXCEPTIONS = [
    ("k-not-transposed", "tl.dot(q, k) needs k as (D, BLOCK_N): load K transposed, with the key index on the "
     "columns (K + cols[None, :] * stride_kn + dims[:, None]), or use tl.trans(k)", _k_not_transposed),
]


def sizes(H, L_q, L_k, D) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, size in {"H": H, "L_q": L_q, "L_k": L_k, "D": D}.items():
        if size not in out.values():
            out[name] = size
    return out


def compiled(submission) -> str:
    """The kernel's Triton IR, compiled for a GPU with CAUSAL on (once per file: kernels.ir keeps it)."""
    stub = kernels.not_written(submission, KERNEL)
    if stub is not None:      # a compile cannot run the stub's raise: say what a launch says
        raise fail("exception", f"your code raised NotImplementedError: {stub}",
                   hint="Write the kernel's body (README.md, the loop of one program).")
    try:
        return kernels.ir(submission, KERNEL, SIGNATURE, IR_CONSTANTS)
    except LearnerError as exc:
        lines = [line for line in exc.message.splitlines() if line.strip()]
        said = next((line for line in reversed(lines) if "Error" in line), lines[-1] if lines else "")
        named = next(((name, sentence) for name, sentence, rule in NAMED_EXCEPTIONS if rule(exc)), None)
        raise fail("exception", f"your kernel does not compile for a GPU: {shorten(said, 300, placeholder=' ...')}",
                   misconception=named[0] if named else None,
                   hint=named[1] if named else
                   "Only triton.language operations compile: no Python objects, lists or calls of other libraries "
                   "inside a kernel; a global a kernel reads must be a tl.constexpr; sizes of tl.arange and blocks "
                   "are tl.constexpr powers of two.") from None


# What Out and Lse hold before the launch: a NaN with a payload of its own, which no arithmetic
# produces, so an element the kernel's stores never wrote is told from a NaN it computed.
SENTINEL = {torch.float32: (torch.int32, 0x7FC0DEAD), torch.float16: (torch.int16, 0x7E5B)}


def sentinel_filled(shape, dtype) -> torch.Tensor:
    as_int, bits = SENTINEL[dtype]
    t = torch.empty(shape, dtype=dtype)
    t.view(as_int).fill_(bits)
    return t


def unwritten(t: torch.Tensor) -> torch.Tensor:
    """Where ``t`` still holds the sentinel's exact bits."""
    as_int, bits = SENTINEL[t.dtype]
    return t.contiguous().view(as_int) == bits


# Every tensor is sent padded to whole blocks, the padding filled with POISON: a load past L_q or L_k
# without its mask reads the same wrong numbers at every run (not whatever lies past a buffer), and
# a store past the end lands in the padding, which is never read back.
POISON = 8.0


def padded(t: torch.Tensor, rows: int, fill) -> torch.Tensor:
    """``t`` (H, L, ...) with rows L .. rows - 1 added, filled with ``fill``."""
    out = torch.full((t.shape[0], rows, *t.shape[2:]), fill, dtype=t.dtype)
    out[:, :t.shape[1]] = t
    return out


def launch(submission, q, k, v, *, causal, block_m, block_n, device):
    """The learner's kernel on (q, k, v): its (Out, Lse), the rows past L_q cut off."""
    H, L_q, D = q.shape
    L_k = k.shape[1]
    rows_q, rows_k = -(-L_q // block_m) * block_m, -(-L_k // block_n) * block_n
    q, k, v = padded(q, rows_q, POISON), padded(k, rows_k, POISON), padded(v, rows_k, POISON)
    out = sentinel_filled((H, rows_q, D), q.dtype)
    lse = sentinel_filled((H, rows_q), torch.float32)
    args = (q, k, v, out, lse, q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
            out.stride(0), out.stride(1), lse.stride(0), L_q, L_k, 1 / math.sqrt(D))
    grid = (rows_q // block_m, H)
    with expect.exceptions_named(NAMED_EXCEPTIONS):
        got = kernels.launch(submission, KERNEL, grid, args, {"D": D, "BLOCK_M": block_m, "BLOCK_N": block_n,
                                                            "CAUSAL": causal}, outputs=(3, 4), params=PARAMS, device=device)
    return _rows(got[0], L_q), _rows(got[1], L_q)


def _rows(t, n: int):
    """The first ``n`` rows of a returned tensor, keeping what the worker said about it."""
    if not isinstance(t, torch.Tensor):
        return t
    cut = t[:, :n]
    cut.lumen_meta = getattr(t, "lumen_meta", None)
    return cut


def check(submission, seed, *, H=3, L_q, L_k, D=16, causal, block_m, block_n, dtype=torch.float32, device="cpu",
          tol=None):
    """The kernel's Out and Lse must match the float64 reference, every row written."""
    gen = inputs.generator(seed)
    q, k, v = (inputs.randn(gen, H, L, D).to(dtype) for L in (L_q, L_k, L_k))
    scale = 1 / math.sqrt(D)
    exp_out, exp_lse = mistakes.flash(q, k, v, causal, L_k, scale)                 # one block: plain softmax
    out, lse = launch(submission, q, k, v, causal=causal, block_m=block_m, block_n=block_n, device=device)
    names = sizes(H, L_q, L_k, D)
    for got, want, what in ((out, dtype, "Out"), (lse, torch.float32, "Lse")):
        expect.is_tensor(got, what)
        if got.dtype != want or got.device.type != "cpu":
            continue                         # the dtype check below says what is wrong
        missing = unwritten(got).reshape(H, L_q, -1).any(-1).any(0)                    # (L_q,)
        if bool(missing.any()):
            rows = missing.nonzero()[:, 0].tolist()
            raise fail("values", f"your kernel wrote nothing in {len(rows)} of the {L_q} rows of {what} "
                       f"(rows {', '.join(map(str, rows[:8]))}{' ...' if len(rows) > 8 else ''})",
                       misconception="rows-not-written", details={"rows": rows[:12]},
                       hint="Every program stores its BLOCK_M rows with tl.store(..., mask=rows < L_q): the grid "
                            "has cdiv(L_q, BLOCK_M) programs per head, so the last block is partly past L_q.")

    def variants(which):
        return lambda: mistakes.variants(q, k, v, causal, block_n, scale, which=which)
    expect.tensors([Expected(out, exp_out, "Out", OUT_AXES, variants(0), tol)], sizes=names, dtype=dtype,
                   device=device)
    expect.tensors([Expected(lse, exp_lse, "Lse", LSE_AXES, variants(1), tol)], sizes=names, dtype=torch.float32,
                   device=device)


# -------------------------------------------------------------------------------------------------
# The contract: a kernel file, and a kernel


@pytest.mark.group("contract")
def test_a_kernel_file(submission):
    """the file holds only kernels, and the kernel has the stub's parameters"""
    kernels.require_kernel_file(submission, KERNEL, PARAMS)


@pytest.mark.group("kernel")
def test_a_blocked_kernel(submission):
    """compiled for a GPU, its matrix products sit in a loop over key blocks"""
    facts = kernels.ir_facts(compiled(submission))
    if facts.dots_in_loops < 2:
        raise fail("property", f"your kernel's IR has {facts.dots} matrix products (tt.dot), {facts.dots_in_loops} "
                   f"of them in a loop ({facts.loops} loops): FlashAttention's loop over key blocks has two, the "
                   "scores and the output", expected="2 tt.dot in a scf.for", got=f"{facts.dots_in_loops} in loops",
                   misconception="not-a-blocked-kernel",
                   hint="Walk the keys in blocks of BLOCK_N with a for loop; in it, s = tl.dot(q, k_t) and "
                        "acc += tl.dot(p, v).")


# -------------------------------------------------------------------------------------------------
# Values


@pytest.mark.group("values")
def test_values(submission, seed, device):
    """Out and Lse match softmax attention (64 queries and keys, blocks of 32)"""
    check(submission, seed, L_q=64, L_k=64, causal=False, block_m=32, block_n=32, device=device)


@pytest.mark.group("values")
def test_many_key_blocks(submission, seed, device):
    """many key blocks: the running max and sum carried across 6 blocks of 16"""
    check(submission, seed + 1, L_q=32, L_k=96, causal=False, block_m=32, block_n=16, device=device)


@pytest.mark.group("lengths")
def test_lengths_not_multiples_of_the_blocks(submission, seed, device):
    """40 queries and 70 keys, blocks of 16 and 32: the last blocks are partly past the end"""
    try:
        check(submission, seed + 2, L_q=40, L_k=70, causal=False, block_m=16, block_n=32, device=device)
    except (CheckFailed, WorkerFailure) as exc:
        name = getattr(getattr(exc, "diagnosis", None), "misconception", None)
        if name in (None, "rows-not-written"):
            raise fail("values", f"lengths that are not multiples of the blocks go wrong ({exc})"[:300],
                       misconception="boundary-masks-missing",
                       hint="Mask every load and store past the end: rows < L_q for q, Out and Lse, cols < L_k for "
                            "K and V (with other=0.0), and the scores of keys past L_k set to -inf before the max.") from None
        raise


@pytest.mark.group("causal")
def test_causal(submission, seed, device):
    """causal, 80 queries and keys, the diagonal inside blocks of 32 and 16"""
    check(submission, seed + 3, L_q=80, L_k=80, causal=True, block_m=32, block_n=16, device=device)


@pytest.mark.group("causal")
def test_causal_fewer_queries(submission, seed, device):
    """causal, 24 queries after 56 keys: aligned bottom-right, as in exercise 5"""
    check(submission, seed + 4, L_q=24, L_k=56, causal=True, block_m=16, block_n=16, device=device)


@pytest.mark.group("causal")
def test_causal_skips_future_blocks(submission):
    """with CAUSAL, the loop over key blocks ends at the diagonal (read from the compiled IR)"""
    facts = kernels.ir_facts(compiled(submission))
    if "%L_k" in facts.dot_loop_bounds:
        raise fail("property", "with CAUSAL, your kernel still visits every key block: its loop runs to L_k, so the "
                   "blocks entirely in a query block's future are computed and then masked away",
                   expected="a loop bound computed from tl.program_id(0)", got="range(0, L_k, BLOCK_N)",
                   misconception="future-blocks-computed",
                   hint="End the loop at the last key the block's last query may see: "
                        "end = tl.minimum((start_m + 1) * BLOCK_M + L_k - L_q, L_k) when CAUSAL, else L_k.")


@pytest.mark.group("dtypes")
def test_float16(submission, seed, device):
    """float16 inputs: Out in float16, Lse in float32"""
    check(submission, seed + 5, L_q=64, L_k=64, causal=True, block_m=32, block_n=32, dtype=torch.float16,
          device=device)


@pytest.mark.group("cuda")
def test_cuda(submission, seed, cuda):
    """runs natively on the GPU"""
    check(submission, seed + 6, L_q=80, L_k=80, causal=True, block_m=32, block_n=16, device=cuda, tol=GPU_FLOAT32)

"""Grading a GPU kernel (exercise.toml ``kernel = "triton"``, exercise 14): what a suite uses.

The learner writes a ``@triton.jit`` kernel with a fixed signature; the grader never calls a
Python wrapper of theirs. It proves three things from its own side:

- the file is a kernel file (:func:`require_kernel_file`: src/lumen_ex/harness/kernel_scan.py reads
  its exact bytes): nothing but imports, constants and kernels, so nothing beside a kernel runs;
- the kernel is one (:func:`ir`, :func:`ir_facts`): compiled for a GPU (no GPU needed), its Triton IR
  holds the matrix products (``tt.dot``) and a loop (``scf.for``) over key blocks;
- its values: :func:`launch` has the worker launch it over the harness's grid, on tensors the
  harness sends and gets back (outputs first filled with NaN, so an element the kernel's stores did
  not write shows).

Example (exercise 14's suite)::

    kernels.require_kernel_file(submission)
    facts = kernels.ir_facts(kernels.ir(submission, "flash_attention_kernel", SIGNATURE, {"D": 32, ...}))
    out, lse = kernels.launch(submission, "flash_attention_kernel", grid, args, constexprs,
                              outputs=(3, 4), params=PARAMS, device=device)
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lumen_ex.core.results import CheckFailed, Diagnosis
from lumen_ex.harness import kernel_scan, wire_replies
from lumen_ex.harness.client import LearnerError
from lumen_ex.sandbox.inside.kernels import MAX_IR_BYTES  # what the worker sends at most

# Same bytes, same IR: an IR costs a worker of its own (Triton imported with the interpreter off)
# and a compile, so a process keeps the last IR_CACHE_SIZE (a check server or a grading process
# sees a file at several seeds; a class has many files).
IR_CACHE_SIZE = 64
_IR_CACHE: dict[tuple[str, str, str], str] = {}


def _source(submission: Any) -> tuple[bytes, str]:
    pool = submission._pool
    file = submission.module_file
    data = pool.source if pool.source is not None else (Path(pool.spec.module_dir) / file).read_bytes()
    return data, file


def require_kernel_file(submission: Any, kernel: str, params: tuple[str, ...]) -> None:
    """The learner's file holds only what kernel_scan allows, else a "forbidden" failure that says
    the first thing it found, with its line; and ``kernel`` takes exactly ``params``, in order. Every
    launch and compile checks it first (once per check): a file that could compute the answer beside
    its kernel fails every test, not one."""
    checked = getattr(submission, "_kernel_file", None)
    if checked is None:
        checked = submission._kernel_file = _kernel_file_failure(submission, kernel, params)
    if checked is not None:
        raise CheckFailed(Diagnosis.from_dict(checked.to_dict()))      # a fresh copy for each test


def _kernel_file_failure(submission: Any, kernel: str, params: tuple[str, ...]) -> Diagnosis | None:
    data, file = _source(submission)
    found = kernel_scan.problems(data, file)
    if found:
        return Diagnosis(
            "forbidden", f"cannot be verified: your {file} {found[0]}"[:400], got=found[:5],
            misconception="unverifiable-source",
            hint="The grader launches your kernel itself and must be sure nothing else computes the answer: "
                 "keep the file to imports of triton and math, constants and @triton.jit functions, and write "
                 "every result with tl.store.")
    names = kernel_scan.parameters(data, kernel)
    if names is None:
        return Diagnosis("missing", f"{kernel} is not defined in {file}", expected=f"def {kernel}(...)",
                         got="nothing by that name",
                         hint=f"Keep the kernel's name {kernel} and its @triton.jit decorator as the stub has them.")
    if tuple(names) != params:
        return Diagnosis("signature", f"{kernel} must take the stub's parameters, in order",
                         expected=list(params), got=names,
                         hint="The grader launches your kernel with exactly the stub's arguments: keep its "
                              "parameter list as it is.")
    return None


def launch(submission: Any, fn: str, grid: tuple[int, ...], args: tuple[Any, ...], constexprs: dict[str, Any], *,
           outputs: tuple[int, ...], params: tuple[str, ...], device: str = "cpu",
           timeout: float | None = None) -> list[torch.Tensor]:
    """Launch kernel ``fn`` (its parameters: ``params``) over ``grid`` with ``args`` (tensors, ints,
    floats) and ``constexprs``, once the file is proven a kernel file; the arguments at ``outputs``,
    as the kernel left them."""
    require_kernel_file(submission, fn, params)
    result = submission.call(fn, args, constexprs, device=device, launch=grid, echo_args=True, timeout=timeout)
    after = result.args_after
    if not isinstance(after, tuple) or len(after) != len(args):
        raise CheckFailed(Diagnosis("protocol", "the worker did not send the kernel's arguments back"))
    got = [after[i] for i in outputs]
    if not all(isinstance(t, torch.Tensor) and t.shape == args[i].shape for t, i in zip(got, outputs)):
        raise CheckFailed(Diagnosis("protocol", "the worker sent back outputs of another shape than it was given"))
    return got


def ir(submission: Any, fn: str, signature: dict[str, str], constexprs: dict[str, Any],
       timeout: float | None = 60.0) -> str:
    """The Triton IR of kernel ``fn``, compiled for a GPU by a worker from the file's bytes
    (``signature``: each parameter's type, "*fp32", "i32", "fp32" or "constexpr"). A kernel that does
    not compile raises LearnerError with the compiler's message."""
    require_kernel_file(submission, fn, tuple(signature))
    data, _ = _source(submission)
    key = (hashlib.sha256(data).hexdigest(), fn, repr(sorted(signature.items())) + repr(sorted(constexprs.items())))
    if key in _IR_CACHE:
        return _IR_CACHE[key]
    pool = submission._pool
    header = {"op": "kernel_ir", "fn": fn, "signature": signature, "constexprs": constexprs}
    # Triton's interpreter and its compiler do not share a process: a worker of its own imports the
    # file with the interpreter off, compiles, and is replaced for the tests after.
    pool.compiling = True
    pool.discard()
    try:
        reply = pool.call(header, [], timeout)
    finally:
        pool.compiling = False
        pool.discard()
    try:
        if not wire_replies.check_ok(reply.header):
            error = wire_replies.check_error(reply.header.get("error"))
        else:
            error = None
            (raw,) = reply.tensors
            if raw.dtype != torch.uint8 or raw.dim() != 1 or raw.numel() > MAX_IR_BYTES:
                raise ValueError("the IR is not a byte string")
            text = bytes(raw.numpy().tobytes()).decode("utf-8", errors="replace")
    except Exception as exc:  # noqa: BLE001  whatever a crafted reply made fail
        raise pool.protocol_failure(exc, reply.output) from None
    if error is not None:
        raise LearnerError(error, reply.output)
    _IR_CACHE[key] = text
    while len(_IR_CACHE) > IR_CACHE_SIZE:
        del _IR_CACHE[next(iter(_IR_CACHE))]           # the oldest first
    return text


def not_written(submission: Any, fn: str) -> str | None:
    """The stub's NotImplementedError message when kernel ``fn`` still raises it (read from the file)."""
    data, _ = _source(submission)
    return kernel_scan.not_written(data, fn)


@dataclass(frozen=True)
class IRFacts:
    dots: int        # tt.dot operations: the matrix products
    loops: int       # scf.for loops
    dots_in_loops: int
    # the upper bound of each loop that holds a product, as the IR names it ("%L_k": the kernel's own
    # argument, every key block visited; a value computed from the program id: the loop ends earlier)
    dot_loop_bounds: tuple[str, ...] = ()


def ir_facts(text: str) -> IRFacts:
    """What the IR shows: its matrix products and loops, and how many products sit inside a loop
    (counted by the nesting of the IR's regions: a ``scf.for`` opens one, its ``}`` closes it)."""
    dots = loops = in_loops = 0
    stack: list[int | None] = []        # for each open region: the index of its loop, None for another region
    bounds: list[str] = []              # each loop's upper bound
    holding: set[int] = set()           # the loops that hold a product
    for line in text.splitlines():
        if re.search(r"\btt\.dot\b", line):
            dots += 1
            inside = [i for i in stack if i is not None]
            in_loops += bool(inside)
            holding.update(inside)
        net = line.count("{") - line.count("}")      # an attribute dict opens and closes on its line
        loop = re.search(r"\bscf\.for\s+%\S+\s*=\s*\S+\s+to\s+(%[\w.]+)", line)
        if loop:
            loops += 1
            bounds.append(loop.group(1))
        for _ in range(-net):
            if stack:
                stack.pop()
        stack += [len(bounds) - 1 if loop and k == 0 else None for k in range(max(net, 0))]
    return IRFacts(dots, loops, in_loops, tuple(bounds[i] for i in sorted(holding)))

"""GPU kernels in the worker (exercise.toml ``kernel = "triton"``): Triton set up before the learner's
file is imported, the grader's own launch of a kernel, and the compile of the file's source for a
GPU target, whose IR the harness reads (src/lumen_ex/harness/kernels.py).

The learner's file may hold only imports of triton and math, constants and ``@triton.jit``
functions (src/lumen_ex/harness/kernel_scan.py proves it before any result counts), so importing it
runs nothing but the decorators.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

MAX_IR_BYTES = 4 * 1024 * 1024
# The GPU a kernel is compiled for when its IR is asked for (no GPU needed): an H100's, sm_90 with 32-wide warps.
TARGET = ("cuda", 90, 32)


# Whether a GPU compile fuses a multiply and an add into one rounding (an FMA). Triton 3.9 fuses unless
# told; it says 3.10 will not. Said here, so the same kernel gets the same numbers whichever Triton
# the grader was installed with (pyproject.toml asks for 3.9 or later), as every Triton so far has done.
FP_FUSION = "1"


def prepare(spec: dict[str, Any]) -> None:
    """Before the learner's file is imported (``@triton.jit`` reads these): Triton's interpreter on the
    CPU (``interpret``; off for a GPU and for a compile), a cache folder of the worker's own (the
    sandbox's home is read-only) and FP_FUSION."""
    if spec.get("language") != "triton":
        raise RuntimeError(f"unknown kernel language {spec.get('language')!r}")
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-")
    os.environ["TRITON_DEFAULT_FP_FUSION"] = FP_FUSION
    if spec.get("interpret"):
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)


def register_source(file: str, source: bytes) -> None:
    """The file's source for ``inspect`` as the check read it, as the learner's file is imported (the
    file on disk may have been saved again since; a compiled kernel is built from its source)."""
    import linecache

    linecache.cache[file] = (len(source), None, source.decode("utf-8", "replace").splitlines(True), file)


def launcher(fn: Any, launch: dict[str, Any]) -> Any:
    """``fn[grid]``: the grader's launch of a Triton kernel over ``grid`` (1 to 3 positive sizes)."""
    grid = launch.get("grid")
    if not (isinstance(grid, list) and 1 <= len(grid) <= 3 and all(type(g) is int and 0 < g <= 65535 for g in grid)):
        raise ValueError(f"bad launch grid {grid!r}")
    if not hasattr(fn, "__getitem__") or not hasattr(fn, "arg_names"):
        raise TypeError(f"{getattr(fn, '__name__', 'it')} is not a Triton kernel: decorate it with @triton.jit")
    return fn[tuple(grid)]


def ir_reply(module: Any, header: dict[str, Any]) -> tuple[dict[str, object], list[Any]]:
    """The reply to a ``kernel_ir`` request: the IR's UTF-8 bytes as the frame's one uint8 tensor."""
    import torch

    data = ir(getattr(module, str(header["fn"])), header)
    return {"ok": True}, [torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)]


def ir(fn: Any, header: dict[str, Any]) -> bytes:
    """The Triton IR (TTIR) of the kernel ``fn``, compiled for TARGET with the argument types
    ``header["signature"]`` and the constants ``header["constexprs"]``. Only in a worker whose file was
    imported with the interpreter off (the harness starts one for it: src/lumen_ex/harness/kernels.py)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if os.environ.get("TRITON_INTERPRET"):
        raise RuntimeError("a kernel is compiled in a worker without Triton's interpreter")
    names = list(fn.arg_names)
    constexprs = {(names.index(k),): v for k, v in dict(header.get("constexprs", {})).items()}
    source = ASTSource(fn=fn, signature=dict(header["signature"]), constexprs=constexprs)
    try:
        text = first_stage(source, GPUTarget(*TARGET))
    except (ImportError, AttributeError, KeyError, TypeError):    # a Triton whose compiler is laid out otherwise
        text = str(triton.compile(source, target=GPUTarget(*TARGET)).asm["ttir"])
    return text.encode()[:MAX_IR_BYTES]


def first_stage(source: Any, target: Any) -> str:
    """The TTIR of ``source``, made as ``triton.compile`` makes it (Triton 3.9's steps, in its order)
    and then left there: the harness reads nothing else, and the later stages (the GPU's IR, PTX and
    ptxas) cost ten times as much CPU (0.08 s instead of 0.7 s and a ptxas process, measured on a
    2-core machine). tests/sandbox/test_kernel_cheats.py holds it to a whole compile's TTIR."""
    from triton._C.libtriton import ir as triton_ir
    from triton.compiler.compiler import make_backend

    backend = make_backend(target)
    options = backend.parse_options(dict(source.parse_options()))
    context = triton_ir.context()
    triton_ir.load_dialects(context)
    backend.load_dialects(context)
    module = source.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(),
                            context)
    stages: dict[str, Any] = {}
    backend.add_stages(stages, options, source.language)
    return str(stages["ttir"](module, {}))

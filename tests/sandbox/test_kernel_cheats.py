"""Exercise 14's cheats: ways around "write it as a kernel", each graded for real (bwrap, a worker
forked as `lumen-ex grade` forks it) and refused from the harness's side before any test counts.

In Triton's interpreter a kernel is Python running in the worker, so the grader holds the file to an
allow-list (src/lumen_ex/harness/kernel_scan.py) checked on the exact bytes the worker imports, and
launches the kernel itself (src/lumen_ex/harness/kernels.py). Each file in tests/corpus/kernel_cheats
is one way around that: it must score 0 on every test that launches or compiles the kernel, with the
forbidden diagnosis "cannot be verified" naming its line. They are graded under bwrap (a worker forked
from the session's zygote) and under docker (workers forked in a grading slot of the grader image,
which has Triton when it is installed here: src/lumen_ex/image/tag.py ``kernel_packages``); a check
whose harness runs inside a container grades the reference in tests/sandbox/test_docker_backend.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import requires_bwrap
from docker_support import docker_param, slot_launcher

from lumen_ex.core import catalog
from lumen_ex.core.results import Status
from lumen_ex.harness import kernel_scan

EXERCISE = catalog.load().find(14)
CHEATS = sorted((Path(__file__).resolve().parents[1] / "corpus" / "kernel_cheats").glob("*.py"))
REFERENCE = EXERCISE.reference_path


def test_the_reference_and_the_stub_are_kernel_files():
    """The allow-list is not vacuous the other way: the reference and the stub pass it."""
    for path in (REFERENCE, EXERCISE.stub_path):
        assert kernel_scan.problems(path.read_bytes(), path.name) == [], path.name


@pytest.mark.parametrize("path", CHEATS, ids=[p.stem for p in CHEATS])
def test_the_scan_names_each_cheat_with_its_line(path):
    found = kernel_scan.problems(path.read_bytes(), path.name)
    assert found and all(f.startswith("line ") for f in found), found


BACKENDS = [pytest.param("bwrap", marks=requires_bwrap, id="bwrap"), docker_param("docker")]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.slow
@pytest.mark.skipif(EXERCISE.missing() is not None, reason="Triton is not installed here")
def test_every_cheat_scores_nothing_and_is_refused_on_every_test(grade, backend):
    """Over 30 s: the reference, then 7 files, each a grading with a worker forked from one warm
    zygote: bwrap's, or a docker grading slot's (as `lumen-ex grade --sandbox docker` starts them;
    the reference's launches run in the image's Triton interpreter, its compile in the image's Triton)."""
    slot, sandbox = None, None
    if backend == "docker":
        slot, sandbox = slot_launcher(), "docker"
    try:
        reference = grade(14, REFERENCE.read_text(), seed=3, sandbox=sandbox, launcher=slot)
        assert reference.sandbox.backend == backend and reference.status is Status.PASS, reference.message
        for path in CHEATS:
            result = grade(14, path.read_text(), seed=3, sandbox=sandbox, launcher=slot)
            assert result.sandbox.backend == backend
            assert result.status is Status.FAIL and result.score == 0, (path.name, result.score)
            graded = [t for t in result.tests if t.status is not Status.SKIPPED]
            assert graded and all(t.diagnosis is not None and t.diagnosis.kind == "forbidden" for t in graded), (
                path.name, [(t.id, t.diagnosis and t.diagnosis.kind) for t in graded])
            assert all("cannot be verified" in t.diagnosis.summary and " line " in t.diagnosis.summary
                       for t in graded if t.diagnosis), path.name
    finally:
        if slot is not None:
            slot.close()


def test_the_ir_facts_count_products_inside_loops_only():
    """kernels.ir_facts reads the nesting of the IR's regions: a tt.dot counts as in a loop only inside
    the braces a scf.for opens (an attribute dict on one line opens and closes nothing)."""
    from lumen_ex.harness.kernels import ir_facts

    text = "\n".join([
        "tt.func public @k(%a: f32) attributes {noinline = false} {",
        "  %s = tt.dot %q, %k, %c : tensor<16x16xf32>",          # before the loop
        "  %r = scf.for %i = %c0 to %end_3 step %c16 iter_args(%x = %s) -> (tensor<16x16xf32>) : i32 {",
        '    %m = "tt.reduce"(%x) <{axis = 1 : i32}> ({',
        "    }) : (tensor<16x16xf32>) -> tensor<16xf32>",
        "    %p = tt.dot %x, %v, %x : tensor<16x16xf32>",        # in the loop
        "  }",
        "  %t = tt.dot %r, %v, %r : tensor<16x16xf32>",           # after it
        "}"])
    facts = ir_facts(text)
    assert (facts.dots, facts.loops, facts.dots_in_loops, facts.dot_loop_bounds) == (3, 1, 1, ("%end_3",))


def test_the_worker_launches_only_a_kernel_over_a_bounded_grid():
    """The worker's side of a launch (src/lumen_ex/sandbox/inside/kernels.py): a grid of 1 to 3 positive
    sizes the harness gave, and only on a Triton kernel (a plain function is refused, never called)."""
    from lumen_ex.sandbox.inside import kernels as inside

    class Kernel:
        arg_names = ["X"]

        def __getitem__(self, grid):
            return ("launched", grid)

    assert inside.launcher(Kernel(), {"grid": [2, 3]}) == ("launched", (2, 3))
    for grid in ([], [0], [1, 2, 3, 4], [1.5], "2", [70000]):
        with pytest.raises(ValueError):
            inside.launcher(Kernel(), {"grid": grid})
    with pytest.raises(TypeError, match="not a Triton kernel"):
        inside.launcher(lambda x: x, {"grid": [1]})


def test_a_kernel_reads_only_constexpr_constants():
    """Triton's compiler lets a kernel read a global only when it is a tl.constexpr: the scan says so
    with the line, and accepts the constexpr form (the interpreter alone would run either)."""
    source = b"\n".join([
        b"import triton", b"import triton.language as tl",
        b"LOG2E = tl.constexpr(1.4426950408889634)", b"LN2 = 0.6931", b"NEG = float('-inf')",
        b"@triton.jit", b"def k(X, N: tl.constexpr):", b"    a = LOG2E * N", b"    b = LN2 + NEG"])
    found = kernel_scan.problems(source, "k.py")
    assert found == ["line 9: LN2 is a plain constant, which Triton's compiler does not let a kernel read: "
                     "write LN2 = tl.constexpr(...)",
                     "line 9: NEG is a plain constant, which Triton's compiler does not let a kernel read: "
                     "write NEG = tl.constexpr(...)"]


def test_the_ir_kept_per_file_is_bounded(monkeypatch):
    """kernels.ir keeps the IR of a file's bytes (a compile takes about a second) for at most
    IR_CACHE_SIZE files, the oldest dropped first; the same bytes are never compiled twice meanwhile."""
    import torch

    from lumen_ex.harness import kernels
    from lumen_ex.harness.client import Reply

    source = EXERCISE.reference_path.read_bytes()
    params = tuple(kernel_scan.parameters(source, "flash_attention_kernel") or ())
    compiled: list[bytes] = []

    class Pool:
        compiling = False

        def __init__(self, data):
            self.source = data

        def discard(self):
            pass

        def call(self, header, tensors, timeout):
            compiled.append(self.source)
            return Reply({"ok": True}, [torch.frombuffer(bytearray(b"tt.dot"), dtype=torch.uint8)])

    class Submission:
        module_file = "triton_flash.py"

        def __init__(self, data):
            self._pool = Pool(data)

    monkeypatch.setattr(kernels, "_IR_CACHE", {})
    monkeypatch.setattr(kernels, "IR_CACHE_SIZE", 3)
    files = [source + f"\n# {i}\n".encode() for i in range(5)]
    signature = dict.fromkeys(params, "i32")
    for data in [*files, files[4], files[0]]:
        assert kernels.ir(Submission(data), "flash_attention_kernel", signature, {}) == "tt.dot"
    assert compiled == [*files, files[0]]          # files[4] was kept; files[0], the oldest, was dropped
    assert len(kernels._IR_CACHE) == 3


@pytest.mark.skipif(EXERCISE.missing() is not None, reason="Triton is not installed here")
@pytest.mark.slow
def test_the_first_stage_alone_makes_the_ttir_of_a_whole_compile(monkeypatch, tmp_path):
    """The worker stops a kernel's compile after its first stage (src/lumen_ex/sandbox/inside/kernels.py
    ``first_stage``): the TTIR it reads is the one ``triton.compile`` makes, for the reference and for
    a file whose loop runs past the diagonal (a whole compile runs ptxas: a few seconds). Both are
    compiled as the worker sets Triton up (``prepare``): multiply-adds fused because the grader says
    so, not because this Triton's default happens to."""
    import importlib.util
    import tempfile

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.compiler.compiler import make_backend

    from lumen_ex.sandbox.inside import kernels as inside

    for name in ("TRITON_INTERPRET", "TRITON_CACHE_DIR", "TRITON_DEFAULT_FP_FUSION"):
        monkeypatch.delenv(name, raising=False)       # and what prepare sets is undone after the test
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    inside.prepare({"language": "triton", "interpret": False})
    assert "TRITON_INTERPRET" not in os.environ and os.environ["TRITON_CACHE_DIR"].startswith(str(tmp_path))
    assert os.environ["TRITON_DEFAULT_FP_FUSION"] == "1"
    assert make_backend(GPUTarget(*inside.TARGET)).parse_options({}).enable_fp_fusion is True
    files = [REFERENCE, next(p for p in EXERCISE.corpus_dir.glob("buggy/*.py") if "future" in p.name)]
    for i, path in enumerate(files):
        spec = importlib.util.spec_from_file_location(f"kernel_file_{i}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        fn = module.flash_attention_kernel
        params = list(fn.arg_names)
        signature = {**{p: "*fp32" for p in params[:5]}, **{p: "i32" for p in params[5:16]}, "scale": "fp32",
                     **{p: "constexpr" for p in params[17:]}}
        constexprs = {(params.index(k),): v for k, v in {"D": 16, "BLOCK_M": 32, "BLOCK_N": 32, "CAUSAL": True}.items()}
        target = GPUTarget(*inside.TARGET)
        first = inside.first_stage(ASTSource(fn=fn, signature=signature, constexprs=constexprs), target)
        whole = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs), target=target)
        assert first == str(whole.asm["ttir"]) and "tt.dot" in first, path.name

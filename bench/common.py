"""Shared helpers for the benchmarks: timed runs of real commands, medians, a scratch workspace.

Benchmarks print ratios measured in one run on one machine (never absolute targets in unit tests,
which flake on shared machines).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXERCISES = ROOT / "src" / "lumen_ex" / "exercises"        # the built-in pack
CORPORA = {"attention": EXERCISES / "01-attention" / "corpus", "kv_cache": EXERCISES / "02-kv-cache" / "corpus"}
REFERENCES = {"attention": EXERCISES / "01-attention" / "reference.py", "kv_cache": EXERCISES / "02-kv-cache" / "reference.py"}
PYTHON = sys.executable
LUMEN_EX = str(Path(sys.executable).parent / "lumen-ex")


def timed(cmd: list[str], cwd: Path | None = None, ok_codes=(0,)) -> float:
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if proc.returncode not in ok_codes:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return elapsed


def median_of(n: int, fn) -> float:
    fn()  # warm the page cache once; not counted
    return statistics.median(fn() for _ in range(n))


def import_torch_seconds(n: int = 5) -> float:
    return median_of(n, lambda: timed([PYTHON, "-c", "import torch"]))


def reference_workspace() -> Path:
    """A fresh workspace whose exercise files are the reference solutions."""
    from lumen_ex.core import catalog

    tmp = Path(tempfile.mkdtemp(prefix="lumen-bench-"))
    subprocess.run([LUMEN_EX, "init", str(tmp / "ws")], check=True, capture_output=True)
    for ex in catalog.load().exercises:
        shutil.copyfile(ex.reference_path, tmp / "ws" / ex.dir / ex.file)
    return tmp / "ws"

"""The package's shape is a rule, checked here (docs/architecture.md):

- layers point one way, the sandbox's own files import nothing else of ours, and click and rich stay
  in the command line: the import-linter contracts in pyproject.toml, run by ``lint-imports``;
- ruff (configured in pyproject.toml) finds nothing, nor does the type checker (mypy, pyproject.toml
  ``[tool.mypy]``: every module of the package);
- a library module over 400 lines says in its docstring why it is one piece, and none is over 600;
  no two of our modules import each other, even through imports made inside functions
  (bench/architecture.py measures both).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "lumen_ex"
BIN = Path(sys.executable).parent
MAX_LINES = 400        # a module over this says in its docstring why it is one piece
HARD_LINES = 600       # and none is over this
sys.path.insert(0, str(ROOT / "bench"))
import architecture  # noqa: E402  (bench/architecture.py)


def _tool(name: str) -> str:
    path = BIN / name
    assert path.exists(), f"{name} is not installed in this environment: pip install -e '.[test]'"
    return str(path)


def test_the_import_contracts_hold():
    proc = subprocess.run([_tool("lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_ruff_finds_nothing():
    proc = subprocess.run([_tool("ruff"), "check", "src", "tests", "bench", "tools"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_the_type_checker_finds_nothing():
    """mypy on the package as pyproject.toml configures it. About 20 s the first time (no cache, and
    over 30 s beside the other xdist worker), a second or two after (.mypy_cache/)."""
    proc = subprocess.run([_tool("mypy")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.stdout.startswith("Success: no issues found"), proc.stdout[-2000:]


def _library_modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if "__pycache__" in rel.parts:
            continue
        if rel.parts[0] == "exercises" and (len(rel.parts) < 3 or rel.parts[2] in ("corpus", "suite")
                                            or rel.parts[2] not in ("reference.py", "mistakes.py")):
            continue     # stubs and corpora are the learners'; a hidden suite's file and test names are its
            #              contract with every past record. An exercise's reference and mistakes count.
        yield path


def _says_why_it_is_one_piece(path: Path) -> bool:
    """Its module docstring has a paragraph that starts "One piece:" (why splitting it would scatter
    one idea over several files)."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return any(par.strip().startswith("One piece:") and len(par.split()) >= 8 for par in doc.split("\n\n"))


def test_a_long_module_says_why_it_is_one_piece():
    """A library module may pass MAX_LINES when its docstring says why it is one piece ("One piece:
    ..."); none passes HARD_LINES. Length alone is not the measure: a module that does one thing may be
    long, and squeezing it under a cap makes it worse (issue "Maintainability")."""
    unexplained, too_long = [], []
    for path in _library_modules():
        n = len(path.read_text().splitlines())
        if n > HARD_LINES:
            too_long.append(f"{path.relative_to(ROOT)} ({n})")
        elif n > MAX_LINES and not _says_why_it_is_one_piece(path):
            unexplained.append(f"{path.relative_to(ROOT)} ({n})")
    assert not too_long, f"split these modules (over {HARD_LINES} lines): " + ", ".join(too_long)
    assert not unexplained, (f"over {MAX_LINES} lines: split these modules, or say in the docstring why each is one "
                             "piece (a paragraph starting 'One piece:'): " + ", ".join(unexplained))


def test_the_one_piece_rule_reads_docstrings(tmp_path):
    """The rule above on two made-up modules: one that says why it is one piece, one that does not."""
    said = tmp_path / "said.py"
    said.write_text('"""A module.\n\nOne piece: the loop and its messages share one state machine and its locks."""\n')
    bare = tmp_path / "bare.py"
    bare.write_text('"""A module.\n\nOne piece."""\nx = 1\n')
    assert _says_why_it_is_one_piece(said) and not _says_why_it_is_one_piece(bare)


@pytest.mark.slow
def test_no_import_cycles():
    measured = architecture.measure(ROOT)
    assert measured["cycles_at_import"] == []
    assert measured["cycles_with_function_imports"] == []


def test_the_files_a_sandbox_sees_import_nothing_of_ours():
    from lumen_ex.sandbox.base import WORKER_FILES

    inside = sorted((PACKAGE / "sandbox" / "inside").glob("*.py"))
    assert {p.name for p in inside} - {"__init__.py"} == set(WORKER_FILES)   # the list the docs and image name
    for path in inside:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                assert not any(a.name.split(".")[0] == "lumen_ex" for a in node.names), path
            elif isinstance(node, ast.ImportFrom):
                assert not (node.module or "").startswith("lumen_ex"), path


def test_the_package_is_one_tree():
    """A src layout: pyproject maps no folder by hand, so the disk tree is the import tree."""
    text = (ROOT / "pyproject.toml").read_text()
    assert "package-dir" not in text
    assert not any((ROOT / name / "__init__.py").exists() for name in
                   ("lumen_ex", "cli", "harness", "sandbox", "graders", "author", "exercises"))

"""The command line through the real entry point (the installed `lumen-ex` script), against goldens.

The golden checks share one workspace whose checks are answered by its check server, as a learner's
repeated `lumen-ex check` is (tests/helpers/cli.py ``WarmWorkspace``): the first is cold, the rest
warm, and what a warm check prints is what a cold one prints (tests/e2e/test_check_server.py). They
grade under bwrap, where a warm check's worker is forked from the server's zygote (the unisolated
mode starts a fresh one for each check; its NOT ISOLATED warning has goldens of its own:
tests/e2e/test_failing_goldens.py). Two checks stay cold on purpose, under the unisolated mode: same
seed, same record across processes; and the progress `list` shows.

Goldens live in tests/golden/; run with LUMEN_EX_UPDATE_GOLDEN=1 to rewrite them after an
intended change, then read the diff. Variable parts (durations, temporary paths, versions) are
normalised before comparing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import LUMEN_EX, requires_bwrap  # noqa: F401
from helpers.cli import REFERENCE_1, SYNTAX_ERROR, compare, normalise, put, run

from lumen_ex.core import catalog

BUGGY_NO_SCALE = '''
import torch

def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1)
    return w @ v, w

def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    return torch.ones(L_q, L_k, dtype=torch.bool, device=device).tril(L_k - L_q)
'''
BUGGY_SHAPE = BUGGY_NO_SCALE.replace("return w @ v, w", "return (w @ v).transpose(-2, -1), w")


def test_init_creates_the_workspace(tmp_path):
    proc = run(["init", "course"], tmp_path)
    assert proc.returncode == 0
    compare("init", normalise(proc.stdout, tmp_path))
    for ex in catalog.load().exercises:
        assert (tmp_path / "course" / ex.dir / ex.file).is_file()
        assert (tmp_path / "course" / ex.dir / "README.md").is_file()
    assert (tmp_path / "course" / "README.md").is_file() and (tmp_path / "course" / "lumen-ex.toml").is_file()
    again = run(["init", "course"], tmp_path)
    assert again.returncode == 2 and again.stderr.startswith("Error: ") and len(again.stderr.splitlines()) == 1


@pytest.mark.parametrize("case,source,code", [
    ("check-pass", REFERENCE_1, 0),
    ("check-no-scale", BUGGY_NO_SCALE, 1),
    ("check-shape", BUGGY_SHAPE, 1),
    ("check-stub", None, 1),
    ("check-syntax-error", SYNTAX_ERROR, 1),
])
@requires_bwrap
@pytest.mark.slow
def test_check_output(warm_workspace, case, source, code):
    ws = warm_workspace
    ws.put(source)
    proc = ws.run(["check", "1", "--sandbox", "bwrap", "--seed", "7"], ws.root / "01-attention")
    assert proc.returncode == code, proc.stdout + proc.stderr
    compare(case, normalise(proc.stdout, ws.root.parent))


@requires_bwrap
@pytest.mark.slow
def test_shape_failure_names_the_axes(warm_workspace):
    warm_workspace.put(BUGGY_SHAPE)
    proc = warm_workspace.run(["check", "attention", "--sandbox", "bwrap", "--seed", "3", "--format", "json"])
    first = next(t for t in json.loads(proc.stdout)["tests"] if t["status"] != "pass")
    assert first["diagnosis"]["kind"] == "shape"
    assert first["diagnosis"]["summary"] == (
        "output: expected (B, H, L_q, d_v) = (2, 3, 5, 6), got (B, H, d_v, L_q) = (2, 3, 6, 5)")


@requires_bwrap
@pytest.mark.slow
def test_json_matches_the_schema(warm_workspace):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((Path(__file__).parents[2] / "docs" / "result.schema.json").read_text())
    for source in (REFERENCE_1, BUGGY_NO_SCALE, SYNTAX_ERROR):
        warm_workspace.put(source)
        proc = warm_workspace.run(["check", "1", "--sandbox", "bwrap", "--format", "json", "--seed", "11"])
        doc = json.loads(proc.stdout)
        jsonschema.validate(doc, schema)
        assert doc["seed"] == 11 and doc["sandbox"]["backend"] == "bwrap" and doc["sandbox"]["isolated"] is True
        assert proc.returncode == {"pass": 0, "fail": 1}[doc["status"]]
        assert doc["score"] == pytest.approx(sum(t["score"] for t in doc["tests"]), abs=1e-3)


@pytest.mark.slow
def test_same_seed_same_record(workspace):
    put(workspace, BUGGY_NO_SCALE)
    docs = [json.loads(run(["check", "1", "--sandbox", "none", "--format", "json", "--seed", "5"], workspace).stdout)
            for _ in range(2)]
    strip = lambda d: [(t["id"], t["status"], t["message"]) for t in d["tests"]]  # noqa: E731
    assert strip(docs[0]) == strip(docs[1])


@pytest.mark.slow
def test_list_shows_progress(workspace):
    put(workspace, REFERENCE_1)
    assert run(["check", "1", "--sandbox", "none", "--seed", "1"], workspace).returncode == 0
    proc = run(["list"], workspace)
    assert proc.returncode == 0
    compare("list", normalise(proc.stdout, workspace.parent))


@pytest.mark.parametrize("columns", [60, 80, 100, 140])
def test_list_keeps_every_slug_whole_at_any_width(workspace, columns):
    """The slug is what `lumen-ex check` takes: never wrapped or cut; the title wraps instead."""
    proc = run(["list"], workspace, {"COLUMNS": str(columns)})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for ex in catalog.load().exercises:
        assert any(line.split()[:2] == [str(ex.number), ex.slug] for line in lines if line.strip()), proc.stdout
        if columns >= 120:
            assert ex.path in proc.stdout
    assert all(len(line.rstrip()) <= columns for line in lines if not line.startswith(("workspace:", "Files:"))), proc.stdout


def test_hints_are_progressive(workspace):
    first = run(["hint", "1"], workspace)
    second = run(["hint", "attention"], workspace)
    assert first.returncode == second.returncode == 0
    assert "hint 1 of" in first.stdout and "hint 2 of" in second.stdout
    compare("hint", normalise(first.stdout + second.stdout, workspace.parent))


@pytest.mark.parametrize("args,code,message", [
    (["check", "99"], 2, "Error: no exercise '99'. Choose one of: 1 (attention), 2 (kv-cache)"),
    (["check", "1", "--device", "tpu"], 2, "Invalid value for '--device'"),
    (["frobnicate"], 2, "No such command 'frobnicate'"),
])
def test_usage_errors_are_one_line(workspace, args, code, message):
    proc = run(args, workspace)
    assert proc.returncode == code
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_outside_a_workspace(tmp_path):
    proc = run(["check", "1"], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"Error: no lumen-ex workspace at or above {tmp_path.resolve()}. "
                                   "Create one with `lumen-ex init DIR`, or pass --workspace DIR")


def test_missing_exercise_file(workspace):
    (workspace / "01-attention" / "attention.py").unlink()
    proc = run(["check", "1"], workspace)
    assert proc.returncode == 2 and "01-attention/attention.py is missing" in proc.stderr


def test_debug_shows_the_traceback(tmp_path):
    proc = run(["--debug", "check", "1"], tmp_path)
    assert proc.returncode == 2 and "Traceback" in proc.stderr


def test_every_command_has_help_and_is_in_the_readme():
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    from lumen_ex.cli.main import cli

    commands = cli.list_commands(cli.make_context("lumen-ex", ["--help"], resilient_parsing=True))
    assert {"list", "init", "check", "hint", "doctor", "watch", "grade", "image"} <= set(commands)
    for command in commands:
        proc = run([command, "--help"], Path.cwd())
        assert proc.returncode == 0 and "Usage: lumen-ex" in proc.stdout
        assert f"lumen-ex {command}" in readme, f"README does not mention `lumen-ex {command}`"


@pytest.mark.slow
def test_doctor_reports_sandboxes(tmp_path):
    proc = run(["doctor", "--format", "json"], tmp_path)
    assert proc.returncode == 0
    names = {(f["area"], f["name"]) for f in json.loads(proc.stdout)["findings"]}
    assert {("sandbox", "bwrap"), ("sandbox", "docker"), ("sandbox", "none"), ("device", "cuda")} <= names


@pytest.mark.parametrize("case,source", [("check-no-scale-80", BUGGY_NO_SCALE), ("check-stub-80", None),
                                         ("check-syntax-error-80", SYNTAX_ERROR)])
@requires_bwrap
@pytest.mark.slow
def test_check_output_at_80_columns(warm_workspace, case, source):
    """At 80 columns no two rows of the test table look the same (the test ids are kept whole),
    and repeated causes are folded into one row."""
    ws = warm_workspace
    ws.put(source)
    proc = ws.run(["check", "1", "--sandbox", "bwrap", "--seed", "7"], ws.root / "01-attention", {"COLUMNS": "80"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    text = normalise(proc.stdout, ws.root.parent)
    assert max(len(line) for line in text.splitlines()) <= 80, text
    rows = [line for line in text.splitlines() if line[:1] in ("✓", "✗", "!", "⏱", "-")]
    assert rows and len(rows) == len(set(rows)), text
    compare(case, text)

"""A platform's grading on the host: Gradescope's and PrairieLearn's submission folders, the platform
entry point (src/lumen_ex/classroom/platforms.py) run on them, and its results.json read back.

``submission`` lays out a submission folder; ``run_on_host`` runs the entry point on it with a host
launcher (bwrap where it works) and returns what ``load`` reads back: the results file, validated
against the platform's schema in tests/schemas/.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from conftest import best_sandbox

from lumen_ex.classroom import platforms
from lumen_ex.sandbox.select import select_backend

SCHEMAS = Path(__file__).parents[1] / "schemas"
SCHEMA = {"gradescope": "gradescope-results.schema.json", "prairielearn": "prairielearn-results.schema.json"}


def submission(folder: Path, files: dict[str, Path | str]) -> Path:
    """A platform's submission folder: ``files`` maps a path inside it to a source file or text."""
    folder.mkdir(parents=True)
    for rel, source in files.items():
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source.read_text() if isinstance(source, Path) else source)
    return folder


def run_on_host(platform: str, sub: Path, results: Path, *exercises: str) -> dict:
    launcher, _ = select_backend(best_sandbox())
    argv = [platform, "--submission", str(sub), "--results", str(results), "--seed", "7", "--device", "cpu"]
    for e in exercises:
        argv += ["--exercise", e]
    assert platforms.run(argv, launcher=launcher) == 0
    return load(platform, results)


def load(platform: str, path: Path) -> dict:
    """The results file, parsed and validated against the platform's schema (tests/schemas/)."""
    doc = json.loads(path.read_text())
    jsonschema.validate(doc, json.loads((SCHEMAS / SCHEMA[platform]).read_text()))
    return doc

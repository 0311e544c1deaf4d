"""The folder a Slurm run of ``lumen-ex grade`` shares with its cluster jobs: DIR/slurm/round-<n>/.

``lumen-ex grade --cluster slurm`` (src/lumen_ex/classroom/slurm.py) grades in *rounds*: each round
is one job array, whose task ``i`` grades shard ``i`` of the students still to grade, and one merge
job that runs when the array has ended, however it ended. A round's folder holds:

- ``plan.json``: what every task and the merge are to do (the class, the exercises, the class seed,
  the options of ``grade``, the shards as lists of student keys), written before anything is
  submitted; the jobs read it, never a command line, so no student's name passes through a shell;
- ``array.sh``, ``merge.sh`` and ``submit.sh``: the job scripts and what submits them;
  ``jobs.json``: the job ids once submitted;
- ``shards/<i>/``: shard i's own ``grade`` folder (its results, records, class.json), written by
  its task exactly as a local ``lumen-ex grade --student ...`` writes DIR; ``shards/<i>/task.json``
  says when the task started, on which node, and when it finished or why it refused;
- ``logs/``: what Slurm captured of each task and of the merge;
- ``collected``: written once the merge has taken in every result of the round.

A result reaches DIR/results only through :func:`collect`: a result document and its record are
copied when the record's ``result_sha256`` matches the document (a task killed between the two
writes left a pair that does not match: it is not copied, and the check is graded again next
round), the document before its record, each written atomically. So DIR holds only whole results,
and a rerun of ``grade`` regrades exactly what no task finished (src/lumen_ex/classroom/store.py
decides what is still true, as for a local run).
"""

from __future__ import annotations

import json
import shutil
import socket
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

from lumen_ex.classroom import store as grade_store
from lumen_ex.classroom.batch_types import GradeRequest, Outcome
from lumen_ex.classroom.gradebook import ClassReport
from lumen_ex.classroom.late import record_times
from lumen_ex.classroom.outputs import write_outputs
from lumen_ex.classroom.planning import Planner
from lumen_ex.core import catalog as catalog_mod
from lumen_ex.core.atomic import write_atomically
from lumen_ex.core.errors import UsageError

SLURM = "slurm"
PLAN = "plan.json"
JOBS = "jobs.json"
TASK = "task.json"
COLLECTED = "collected"
PLAN_FORMAT = 1


def rounds_dir(out: Path) -> Path:
    return Path(out) / SLURM


def rounds(out: Path) -> list[Path]:
    """DIR/slurm/round-<n> folders that hold a plan, oldest first."""
    found = []
    for path in rounds_dir(out).glob("round-*"):
        suffix = path.name.removeprefix("round-")
        if suffix.isdigit() and (path / PLAN).is_file():
            found.append((int(suffix), path))
    return [path for _, path in sorted(found)]


def new_round(out: Path) -> Path:
    """A new, empty round folder (the next number)."""
    numbers = [int(p.name.removeprefix("round-")) for p in rounds(out)]
    path = rounds_dir(out) / f"round-{max(numbers, default=0) + 1}"
    path.mkdir(parents=True)
    (path / "logs").mkdir()
    return path


def shard_dir(round_dir: Path, index: int) -> Path:
    return Path(round_dir) / "shards" / str(index)


# -- the plan ------------------------------------------------------------------------------------


def write_plan(round_dir: Path, req: GradeRequest, seed: int, shards: list[list[str]]) -> dict:
    """plan.json: ``req`` (with the class seed fixed) and the shards' student keys."""
    plan = {
        "format": PLAN_FORMAT,
        "submissions": str(Path(req.submissions).absolute()),
        "out": str(Path(req.out).absolute()),
        "exercises": [ex.slug for ex in req.exercises],
        "jobs": req.jobs, "sandbox": req.sandbox, "unsafe": req.unsafe, "force": req.force,
        "students": list(req.students), "seed": seed, "device": req.device, "timeout": req.timeout,
        "formats": list(req.formats), "roster": str(Path(req.roster).absolute()) if req.roster else None,
        "shards": shards,
    }
    write_atomically(Path(round_dir) / PLAN, json.dumps(plan, indent=1) + "\n")
    return plan


def read_plan(round_dir: Path) -> dict:
    try:
        plan = json.loads((Path(round_dir) / PLAN).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {Path(round_dir) / PLAN}: {exc}",
                         "Run `lumen-ex grade ... --cluster slurm` again: it plans a new round") from None
    if not isinstance(plan, dict) or plan.get("format") != PLAN_FORMAT:
        raise UsageError(f"{Path(round_dir) / PLAN} was written by another version of lumen-ex",
                         "Run `lumen-ex grade ... --cluster slurm` again with this version")
    return plan


def request_of(plan: dict, round_dir: Path | None = None, shard: int | None = None) -> GradeRequest:
    """The ``grade`` request of the whole class (into DIR), or of ``round_dir``'s shard ``shard``
    (into the shard's own folder, its students alone)."""
    cat = catalog_mod.load()
    out = Path(plan["out"])
    req = GradeRequest(submissions=Path(plan["submissions"]), out=out,
                       exercises=[cat.find(slug) for slug in plan["exercises"]], jobs=plan["jobs"],
                       sandbox=plan["sandbox"], unsafe=plan["unsafe"], force=plan["force"],
                       students=tuple(plan["students"]), seed=plan["seed"], device=plan["device"],
                       timeout=plan["timeout"], formats=tuple(plan["formats"]),
                       roster=Path(plan["roster"]) if plan["roster"] else None)
    if round_dir is None or shard is None:
        return req
    return replace(req, out=shard_dir(round_dir, shard), students=tuple(plan["shards"][shard]), exclude=(out,))


def seed_shard(out: Path, round_dir: Path, index: int, keys: list[str]) -> None:
    """Give shard ``index`` the students' current results, so that its ``grade`` resumes them
    (a student with one stale exercise of three is graded on that one)."""
    for key in keys:
        source = Path(out) / grade_store.RESULTS / key
        if source.is_dir():
            shutil.copytree(source, shard_dir(round_dir, index) / grade_store.RESULTS / key, dirs_exist_ok=True)


# -- the tasks' records ----------------------------------------------------------------------------


def mark_task(round_dir: Path, index: int, **fields) -> None:
    """shards/<i>/task.json: when the task started (and where), and when it finished or why it refused."""
    path = shard_dir(round_dir, index) / TASK
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data.update(fields)
    write_atomically(path, json.dumps(data, indent=1) + "\n")


def read_task(round_dir: Path, index: int) -> dict:
    try:
        data = json.loads((shard_dir(round_dir, index) / TASK).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def node() -> str:
    return socket.gethostname()


# -- collecting the results into DIR ---------------------------------------------------------------


class Pair(NamedTuple):
    """A result document and its record, as read from a shard's results folder."""

    document: Path
    document_text: str
    record: Path
    record_text: str


def whole_pairs(results: Path) -> list[Pair]:
    """The (document, record) pairs under one student's results folder whose record matches its
    document (src/lumen_ex/classroom/store.py ``belongs_to``)."""
    pairs = []
    for record in sorted(results.glob(f"*{grade_store.RECORD_SUFFIX}")):
        doc = record.with_name(record.name.removesuffix(grade_store.RECORD_SUFFIX) + ".json")
        try:
            text, kept_text = doc.read_text(), record.read_text()
            kept = json.loads(kept_text)
        except (OSError, ValueError):
            continue
        if isinstance(kept, dict) and grade_store.belongs_to(kept, text):
            pairs.append(Pair(doc, text, record, kept_text))
    return pairs


def collect(out: Path) -> int:
    """Copy every whole result of the rounds not yet collected into DIR (each student from the
    newest round that graded it), the document before its record; returns how many were copied."""
    newest: dict[str, Path] = {}          # student key -> its results folder in the newest round
    for round_dir in rounds(out):
        if (round_dir / COLLECTED).exists():
            continue
        plan = read_plan(round_dir)
        for index, keys in enumerate(plan["shards"]):
            for key in keys:
                newest[key] = shard_dir(round_dir, index) / grade_store.RESULTS / key
    copied = 0
    for key, folder in sorted(newest.items()):
        if not folder.is_dir():
            continue
        target = Path(out) / grade_store.RESULTS / key
        for pair in whole_pairs(folder):
            write_atomically(target / pair.document.name, pair.document_text)
            write_atomically(target / pair.record.name, pair.record_text)
            copied += 1
        info = folder / grade_store.SUBMISSION_INFO
        if info.is_file():
            write_atomically(target / info.name, info.read_text())
    return copied


def mark_collected(round_dir: Path) -> None:
    write_atomically(Path(round_dir) / COLLECTED, grade_store.now() + "\n")


# -- DIR's outputs, as a local run writes them ------------------------------------------------------


def finish(req: GradeRequest) -> tuple[ClassReport, Outcome]:
    """Write DIR's class record, submission times, gradebook, report and feedback files from the
    results in DIR, as a local ``grade`` does after grading; grades nothing. The outcome's states
    say which checks have no result that is still true."""
    planner = Planner(replace(req, status_only=True, force=False))   # what is true now, --force or not
    outcome = planner.status()
    planner.save_class()
    record_times(req.out, outcome.students)
    report = write_outputs(Path(req.out), [s.student for s in outcome.students], req.exercises,
                           Path(req.submissions).name, req.formats)
    return report, outcome


"""``lumen-ex grade --cluster slurm``: grade a class on a Slurm cluster, as an ordinary user.

    lumen-ex grade SUBMISSIONS --all --out DIR --cluster slurm [--shards N] [--partition P]
        [--account A] [--shard-time 30:00] [--cpus-per-task C] [--mem 8G] [--gres gpu:1]
        [--sbatch-options FILE] [--no-wait]
    lumen-ex grade SUBMISSIONS --all --out DIR --emit slurm [the same options]

A run plans a *round* (src/lumen_ex/classroom/slurm_rounds.py has its folder, DIR/slurm/round-<n>/):

1. the results of earlier rounds are taken into DIR, and the plan of a local ``grade`` decides which
   student x exercise has no result that is still true (src/lumen_ex/classroom/store.py): the
   students with one are dealt into shards (``--shards``, else one per STUDENTS_PER_SHARD), in the
   order of their keys, each shard given its students' current results so that it resumes them;
2. one job array (``array.sh``: task i runs ``grade`` on shard i, in the shard's own folder, with
   the class seed, ``--jobs`` = the task's CPUs, the same grading processes, forked workers and
   records as a local ``grade --jobs N``) and one merge job that depends on it (``merge.sh``,
   ``--dependency=afterany``: it runs however the tasks ended) are submitted with ``sbatch``
   (``submit.sh``; ``--emit slurm`` writes all of it and submits nothing);
3. unless ``--no-wait``, the command follows the jobs (``squeue``) and the results the tasks have
   recorded, then takes the results into DIR and writes the gradebook, the report, the feedback and
   the ``--format`` files exactly as a local run does (the merge job writes the same files, so that
   ``--no-wait`` gets them too).

``grade`` run again resumes: what is still true is kept, and only the checks no task finished (a
task cancelled, preempted, past its time limit, on a node that failed) or that changed since are
planned into a new round. ``grade --status`` says where the latest round stands, from the tasks'
records. The verdicts are those of a local ``grade`` of the same class with the same class seed:
each task is that ``grade``, on its students.

The tasks run as whoever submitted them, with no root: bwrap makes its sandbox in an unprivileged
user namespace (a node that forbids them makes each task refuse to grade, saying why, and the
command refuses before submitting when the submitting node forbids them too), and the resource
limits are those a sandbox can set without root (rlimits) inside the task's allocation (``--mem``,
``--cpus-per-task``: Slurm's cgroup, where the site uses one). docs/classroom.md says what a site
must provide.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from lumen_ex.classroom import slurm_rounds as rounds_mod
from lumen_ex.classroom import store as grade_store
from lumen_ex.classroom.batch_types import GradeRequest, Outcome
from lumen_ex.classroom.gradebook import ClassReport
from lumen_ex.classroom.planning import Planner
from lumen_ex.classroom.sandbox_choice import choose_sandbox
from lumen_ex.classroom.slurm_rounds import JOBS, shard_dir
from lumen_ex.core.atomic import write_atomically
from lumen_ex.core.errors import UsageError
from lumen_ex.core.trusted import child_env

STUDENTS_PER_SHARD = 8       # the default shard size: a task's start (two torch imports) is worth 8 students
MAX_SHARDS = 1000
POLL_S = 2.0                 # how often a waiting run asks squeue
SQUEUE_FAILURES = 5          # squeue failing this many times in a row ends the wait with an error
# What a value passed into an #SBATCH line may hold (no newline, no shell or Slurm syntax of its own).
SBATCH_VALUE = re.compile(r"[A-Za-z0-9_.:,=+/@%-]{1,200}")
SBATCH_PATH = re.compile(r"[A-Za-z0-9_.+@%,=:/-]+")      # a path an #SBATCH line can carry as it is
TASK_MODULE = "lumen_ex.classroom.slurm_task"


@dataclass(frozen=True)
class SlurmOptions:
    """What the cluster is asked for; None leaves it to the site's defaults."""

    shards: int | None = None          # how many array tasks (default: one per STUDENTS_PER_SHARD students)
    partition: str | None = None
    account: str | None = None
    time_limit: str | None = None      # per task, in Slurm's form (minutes, MM:SS, HH:MM:SS, D-HH)
    cpus_per_task: int | None = None   # default: grade's --jobs
    mem: str | None = None             # per task, e.g. 8G
    gres: str | None = None            # e.g. gpu:1 (with --device cuda)
    sbatch_file: Path | None = None    # more #SBATCH lines, one per line
    wait: bool = True


@dataclass
class Submitted:
    """A round written (and submitted, unless emitted): its folder, shards and job ids."""

    round_dir: Path | None
    shards: int = 0
    students: int = 0
    checks: int = 0
    array: str = ""
    merge: str = ""
    written: list[Path] | None = None


def plan_round(req: GradeRequest, opts: SlurmOptions) -> Submitted:
    """Take earlier rounds' results into DIR, then write a round for what is left (its folder is
    None when everything is graded already)."""
    extra = _checked_options(req, opts)      # every refusal comes before anything is written or submitted
    choose_sandbox(req.sandbox, req.unsafe)
    rounds_mod.collect(req.out)
    outcome = Planner(replace(req, status_only=True)).status()
    todo: dict[str, int] = Counter(sub.student for sub, _, state in outcome.states if req.force or not state.current)
    if not todo:
        return Submitted(None)
    keys = sorted(todo)
    count = opts.shards or math.ceil(len(keys) / STUDENTS_PER_SHARD)
    count = max(1, min(count, len(keys), MAX_SHARDS))
    size = math.ceil(len(keys) / count)
    shards = [keys[i:i + size] for i in range(0, len(keys), size)]
    round_dir = rounds_mod.new_round(req.out)
    rounds_mod.write_plan(round_dir, replace(req, jobs=opts.cpus_per_task or req.jobs), outcome.seed, shards)
    for index, shard in enumerate(shards):
        shard_dir(round_dir, index).mkdir(parents=True)
        if not req.force:
            rounds_mod.seed_shard(req.out, round_dir, index, shard)
    written = write_scripts(round_dir, req, opts, len(shards), extra)
    return Submitted(round_dir, len(shards), len(keys), sum(todo.values()), written=written)


def _checked_options(req: GradeRequest, opts: SlurmOptions) -> list[str]:
    """Refuse what cannot go into an #SBATCH line; the --sbatch-options file's lines."""
    if not SBATCH_PATH.fullmatch(str(Path(req.out).absolute())):
        raise UsageError(f"--out {req.out}: Slurm's #SBATCH lines cannot carry this path (spaces or other "
                         "special characters)", "Use a folder whose path has only letters, digits and . _ - /")
    for name in ("partition", "account", "time_limit", "mem", "gres"):
        value = getattr(opts, name)
        if value is not None and not SBATCH_VALUE.fullmatch(value):
            raise UsageError(f"--{name.replace('_', '-')} {value!r} is not a value Slurm takes",
                             "Use letters, digits and . : , = + / @ % - only")
    for number in (opts.shards, opts.cpus_per_task):
        if number is not None and number < 1:
            raise UsageError("--shards and --cpus-per-task must be at least 1", "Pass 1 or more")
    return extra_lines(opts.sbatch_file)


def extra_lines(path: Path | None) -> list[str]:
    """The ``--sbatch-options`` file's lines: each ``#SBATCH ...`` (blank lines and ``# `` comments are
    left out); anything else is refused, so the file cannot add commands to the job scripts."""
    if path is None:
        return []
    lines = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        text = line.strip()
        if not text or (text.startswith("#") and not text.startswith("#SBATCH")):
            continue
        if not re.fullmatch(r"#SBATCH --?[A-Za-z][A-Za-z0-9-]*(?:[= ][^\x00-\x1f`$;&|<>\\]{0,200})?", text):
            raise UsageError(f"{path}:{n} is not an #SBATCH line: {text[:80]!r}",
                             "Write one `#SBATCH --option=value` per line")
        lines.append(text)
    return lines


def write_scripts(round_dir: Path, req: GradeRequest, opts: SlurmOptions, shards: int, extra: list[str]) -> list[Path]:
    """array.sh, merge.sh and submit.sh in ``round_dir`` (``extra``: the --sbatch-options lines)."""
    python = shlex.quote(sys.executable)
    here = shlex.quote(str(round_dir.absolute()))
    common = [f"#SBATCH --{flag}={value}" for flag, value in (("partition", opts.partition),
                                                              ("account", opts.account)) if value]
    task = [*common, f"#SBATCH --cpus-per-task={opts.cpus_per_task or req.jobs}"]
    task += [f"#SBATCH --{flag}={value}" for flag, value in (("time", opts.time_limit), ("mem", opts.mem),
                                                            ("gres", opts.gres)) if value]
    header = "# Written by `lumen-ex grade --cluster slurm` (src/lumen_ex/classroom/slurm.py, docs/classroom.md)."
    array = ["#!/bin/bash", "#SBATCH --job-name=lumen-ex-grade", f"#SBATCH --array=0-{shards - 1}",
             f"#SBATCH --output={round_dir.absolute()}/logs/shard-%a.log", *task, *extra, header,
             "cd /", f'exec {python} -I -m {TASK_MODULE} shard {here} "$SLURM_ARRAY_TASK_ID"', ""]
    merge = ["#!/bin/bash", "#SBATCH --job-name=lumen-ex-merge", f"#SBATCH --output={round_dir.absolute()}/logs/merge.log",
             *common, "#SBATCH --cpus-per-task=1", *extra, header, "cd /",
             f"exec {python} -I -m {TASK_MODULE} merge {here}", ""]
    submit = ["#!/bin/bash", header, "# Submits this round's job array, then its merge job once the array has ended.",
              "set -euo pipefail", f"cd {here}", "array=$(sbatch --parsable array.sh)", "array=${array%%;*}",
              "merge=$(sbatch --parsable --dependency=afterany:$array merge.sh)", "merge=${merge%%;*}",
              f'printf \'{{"array": "%s", "merge": "%s"}}\\n\' "$array" "$merge" > {JOBS}',
              'echo "submitted: job array $array, merge job $merge"', ""]
    written = []
    for name, lines in (("array.sh", array), ("merge.sh", merge), ("submit.sh", submit)):
        path = round_dir / name
        write_atomically(path, "\n".join(lines))
        path.chmod(0o755)
        written.append(path)
    return written


def submit(sub: Submitted) -> Submitted:
    """Run the round's submit.sh (sbatch must be on PATH); the job ids it recorded."""
    if shutil.which("sbatch") is None:
        raise UsageError("sbatch is not on PATH: --cluster slurm submits with Slurm's sbatch",
                         "Run it on a login node of the cluster, or use --emit slurm and run submit.sh there")
    assert sub.round_dir is not None
    proc = subprocess.run(["bash", str(sub.round_dir / "submit.sh")], capture_output=True, text=True,
                          env=child_env(), timeout=120, cwd="/")
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise UsageError(f"sbatch refused the round in {sub.round_dir}: {why[:300]}",
                         "Check --partition, --account and the other options with your site's documentation")
    jobs = json.loads((sub.round_dir / JOBS).read_text())
    return replace(sub, array=str(jobs["array"]), merge=str(jobs["merge"]))


# -- following a round ------------------------------------------------------------------------------


def queue_states(job_ids: list[str]) -> Counter[str] | None:
    """How many of the jobs' tasks are in each state (PENDING, RUNNING, ...); None if squeue failed."""
    proc = subprocess.run(["squeue", "-h", "-j", ",".join(job_ids), "-o", "%T"], capture_output=True, text=True,
                          env=child_env(), timeout=60, cwd="/")
    if proc.returncode != 0:
        return None
    return Counter(line.strip() for line in proc.stdout.splitlines() if line.strip())


def recorded(round_dir: Path) -> tuple[int, int]:
    """(checks recorded whole by the round's tasks, checks the round has to grade)."""
    plan = rounds_mod.read_plan(round_dir)
    total = sum(len(keys) for keys in plan["shards"]) * len(plan["exercises"])
    done = 0
    for index, keys in enumerate(plan["shards"]):
        for key in keys:
            folder = shard_dir(round_dir, index) / grade_store.RESULTS / key
            if folder.is_dir():
                done += len(rounds_mod.whole_pairs(folder))
    return min(done, total), total


def wait(sub: Submitted, say: Callable[[str], None], poll_s: float = POLL_S) -> None:
    """Follow the round until its jobs have left the queue, saying what changed."""
    assert sub.round_dir is not None
    last, failures = "", 0
    while True:
        states = queue_states([sub.array, sub.merge])
        if states is None:
            failures += 1
            if failures >= SQUEUE_FAILURES:
                raise UsageError(f"squeue failed {failures} times in a row while following jobs {sub.array} and "
                                 f"{sub.merge}", "Run the same command again once the cluster answers: it resumes")
        else:
            failures = 0
        done, total = recorded(sub.round_dir)
        queue = ", ".join(f"{n} {state.lower()}" for state, n in sorted((states or Counter()).items()))
        line = f"{done} of {total} checks recorded; jobs: {queue or 'ended'}"
        if line != last:
            say(line)
            last = line
        if states is not None and not states:
            return
        time.sleep(poll_s)


def unfinished(round_dir: Path, *, ended: bool = True) -> list[str]:
    """One line for each shard of the round whose task did not finish, and why, as far as its record
    says (``ended``: the round's jobs have left the queue; otherwise a task may still be running)."""
    plan = rounds_mod.read_plan(round_dir)
    lines = []
    for index, keys in enumerate(plan["shards"]):
        task = rounds_mod.read_task(round_dir, index)
        if task.get("finished"):
            continue
        if not ended and not task.get("refused") and not task.get("interrupted"):
            why = (f"running on {task.get('node', '?')} since {task['started']}" if task.get("started") else
                   "waiting in the queue")
        elif task.get("refused"):
            why = f"refused: {task['refused']}"
        elif task.get("interrupted"):
            why = (f"was stopped at {task['interrupted']} after {task.get('graded', 0)} checks and did not finish "
                   "(cancelled, preempted or past its time limit)")
        elif task.get("started"):
            why = (f"started on {task.get('node', '?')} at {task['started']} and did not finish (killed, or its "
                   "node failed)")
        else:
            why = "never started"
        lines.append(f"shard {index} ({len(keys)} students): {why}; log: {round_dir / 'logs' / f'shard-{index}.log'}")
    return lines


def finish(req: GradeRequest, sub: Submitted | None = None) -> tuple[ClassReport, Outcome, list[str]]:
    """Take the results into DIR and write its outputs (:func:`slurm_rounds.finish`); the notes say
    which shards did not finish and which checks still have no result."""
    rounds_mod.collect(req.out)
    round_dir = sub.round_dir if sub is not None else None
    if round_dir is not None:     # the round's class seed, whatever DIR records
        req = replace(req, seed=rounds_mod.read_plan(round_dir)["seed"])
    report, outcome = rounds_mod.finish(req)
    notes = unfinished(round_dir) if round_dir is not None else []
    if round_dir is not None and sub is not None and sub.merge:
        rounds_mod.mark_collected(round_dir)
    missing = sum(not state.current for _, _, state in outcome.states)
    if missing:
        notes.append(f"{missing} checks have no result yet: run the same command again to submit them")
    return report, outcome, notes


def status_lines(out: Path) -> list[str]:
    """For ``grade --status``: where the latest round stands, from its tasks' records."""
    found = rounds_mod.rounds(out)
    if not found:
        return []
    round_dir = found[-1]
    done, total = recorded(round_dir)
    try:
        jobs = json.loads((round_dir / JOBS).read_text())
        ids = f"job array {jobs.get('array')}, merge job {jobs.get('merge')}"
    except (OSError, ValueError):
        ids = "not submitted (run its submit.sh)"
    ended = (round_dir / rounds_mod.COLLECTED).exists()
    state = "collected into DIR" if ended else "not yet collected"
    return [f"slurm {round_dir.name}: {ids}; {done} of {total} checks recorded by its tasks; {state}",
            *unfinished(round_dir, ended=ended)]

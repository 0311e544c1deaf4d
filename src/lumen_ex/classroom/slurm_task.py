"""What the jobs of ``lumen-ex grade --cluster slurm`` run on the cluster's nodes.

    python -I -m lumen_ex.classroom.slurm_task shard ROUND_DIR INDEX    (a task of the job array)
    python -I -m lumen_ex.classroom.slurm_task merge ROUND_DIR          (the merge job)

A shard task grades its students with ``lumen-ex grade``'s own library call
(src/lumen_ex/classroom/class_run.py), into the shard's folder, with the round's options and class
seed (src/lumen_ex/classroom/slurm_rounds.py ``request_of``); it records when it started and
finished in the shard's task.json, or why it refused (no sandbox on this node, say). The merge job
takes every whole result of the round into DIR and writes DIR's gradebook, report and feedback
files as a local run does. Both are trusted processes: started isolated (``python -I`` in ``/``),
they import nothing from a student's folder, and the students' code runs only in the sandboxed
workers of the grading processes, as in a local ``grade``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from lumen_ex.classroom import slurm as slurm_mod
from lumen_ex.classroom import slurm_rounds as rounds_mod
from lumen_ex.classroom import store as grade_store
from lumen_ex.classroom.class_run import grade
from lumen_ex.core.errors import LumenError
from lumen_ex.core.trusted import quick_exit

USAGE = "usage: python -I -m lumen_ex.classroom.slurm_task (shard ROUND_DIR INDEX | merge ROUND_DIR)"


def run_shard(round_dir: Path, index: int) -> int:
    """Grade shard ``index`` of the round; 0 when every check reached a verdict, 3 when some is an
    error, 2 when the task refused to grade (the reason is in its task.json and its log), 130 when
    it was stopped (what it graded is kept)."""
    plan = rounds_mod.read_plan(round_dir)
    if index >= len(plan["shards"]):
        raise LumenError(f"the round in {round_dir} has {len(plan['shards'])} shards, not {index + 1}")
    rounds_mod.mark_task(round_dir, index, started=grade_store.now(), node=rounds_mod.node(),
                         job=os.environ.get("SLURM_JOB_ID", ""), finished=None, refused=None,
                         interrupted=None)
    try:
        run = grade(rounds_mod.request_of(plan, round_dir, index))
    except LumenError as exc:
        why = exc.message + (f" ({exc.next_step})" if exc.next_step else "")
        rounds_mod.mark_task(round_dir, index, refused=why)
        print(f"lumen-ex: shard {index} refused to grade: {why}", file=sys.stderr)
        return 2
    if run.outcome.interrupted:       # SIGTERM from Slurm (scancel, the time limit, preemption)
        rounds_mod.mark_task(round_dir, index, interrupted=grade_store.now(), graded=run.outcome.graded)
        print(f"lumen-ex: shard {index} was stopped after {run.outcome.graded} checks", file=sys.stderr)
        return 130
    rounds_mod.mark_task(round_dir, index, finished=grade_store.now(), graded=run.outcome.graded,
                         resumed=run.outcome.resumed)
    print(f"lumen-ex: shard {index}: {run.outcome.graded} checks graded, {run.outcome.resumed} kept")
    return 3 if run.report.needs_look else 0


def run_merge(round_dir: Path) -> int:
    """Take the round's results into DIR and write DIR's outputs."""
    plan = rounds_mod.read_plan(round_dir)
    req = rounds_mod.request_of(plan)
    _, _, notes = slurm_mod.finish(req, slurm_mod.Submitted(round_dir, merge="this job"))
    for note in notes:
        print(f"lumen-ex: {note}")
    print(f"lumen-ex: gradebook written to {Path(req.out) / 'gradebook.csv'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        if len(args) == 3 and args[0] == "shard" and args[2].isdigit():
            return run_shard(Path(args[1]), int(args[2]))
        if len(args) == 2 and args[0] == "merge":
            return run_merge(Path(args[1]))
    except LumenError as exc:
        print(f"lumen-ex: {exc.message}" + (f"\n{exc.next_step}" if exc.next_step else ""), file=sys.stderr)
        return exc.exit_code
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    quick_exit()
    sys.exit(main())

"""``lumen-ex grade`` as one library call: grade a class (or record the results a cluster job wrote),
record when each student submitted, then write the gradebook, the class report and the feedback files.

    from pathlib import Path
    from lumen_ex.classroom.batch_types import GradeRequest
    from lumen_ex.classroom.class_run import grade
    from lumen_ex.core import catalog

    done = grade(GradeRequest(submissions=Path("submissions"), out=Path("out"),
                              exercises=[catalog.load().find(1)]))
    done.report.rows          # one row per student, as gradebook.csv has them
    done.outcome.interrupted  # True after Ctrl-C: run it again to resume

The command (src/lumen_ex/cli/classroom.py ``grade``) is this call with a progress display, the
terminal report and the exit code; ``--status`` and ``--emit k8s`` grade nothing and stay apart
(scheduler.py ``class_status``, k8s.py ``emit_manifests``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lumen_ex.classroom.batch_types import GradeRequest, Outcome, Progress
from lumen_ex.classroom.gradebook import ClassReport
from lumen_ex.classroom.late import record_times
from lumen_ex.classroom.outputs import write_outputs
from lumen_ex.classroom.scheduler import grade_class


@dataclass
class ClassRun:
    outcome: Outcome          # what was graded, resumed, skipped; the run's notes
    report: ClassReport       # what gradebook.csv and report.md were written from


def grade(req: GradeRequest, progress: Progress | None = None, *, collect: Path | None = None) -> ClassRun:
    """Grade ``req``'s class into ``req.out`` (resuming what is graded already), or with ``collect``,
    record the result documents a Kubernetes job wrote there instead (src/lumen_ex/classroom/k8s.py);
    then the submission times, and every file of the class's outputs."""
    if collect is not None:
        from lumen_ex.classroom.k8s import collect_results

        outcome = collect_results(req, collect)
    else:
        outcome = grade_class(req, progress)
    record_times(req.out, outcome.students)
    report = write_outputs(req.out, [s.student for s in outcome.students], req.exercises,
                           Path(req.submissions).name, req.formats)
    return ClassRun(outcome, report)

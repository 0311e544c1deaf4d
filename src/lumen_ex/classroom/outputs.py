"""Everything ``lumen-ex grade`` writes from the result documents once a run is over.

``gradebook.csv`` (src/lumen_ex/classroom/gradebook.py), ``report.md``
(src/lumen_ex/classroom/class_report.py), the per-student feedback files
(src/lumen_ex/classroom/feedback_files.py) and the ``--format`` views beside each result document
(src/lumen_ex/feedback/formats). All are rebuilt whole from the documents on disk, after every run.
"""

from __future__ import annotations

from pathlib import Path

from lumen_ex.classroom.class_report import report_markdown
from lumen_ex.classroom.feedback_files import write_feedback
from lumen_ex.classroom.gradebook import ClassReport, build, gradebook_csv
from lumen_ex.classroom.store import result_path
from lumen_ex.core.atomic import write_atomically
from lumen_ex.core.catalog import Exercise
from lumen_ex.core.results import RunResult
from lumen_ex.core.untrusted import encodable
from lumen_ex.feedback import formats as formats_mod


def write_outputs(out: Path, students: list[str], exercises: list[Exercise], title: str,
                  formats: tuple[str, ...] = ()) -> ClassReport:
    """Write gradebook.csv, report.md and the extra per-student format files; return the report."""
    report = build(out, students, exercises, title)
    write_atomically(out / "gradebook.csv", encodable(gradebook_csv(report)))
    write_atomically(out / "report.md", encodable(report_markdown(report)))
    write_feedback(out, report)
    if formats:
        for row in report.rows:
            for ex in exercises:
                doc = row.docs.get(ex.slug)
                if doc is None:
                    continue
                result = RunResult.from_dict(doc)
                for name in formats:
                    fmt = formats_mod.get(name)
                    if fmt.name == "json":
                        continue        # the result document itself
                    path = result_path(out, row.student, ex).with_suffix(fmt.suffix)
                    write_atomically(path, encodable(fmt.render(result)))
    return report

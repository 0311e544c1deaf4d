"""Grade the whole corpus of known-correct and known-buggy submissions and count how the grader did.

    python bench/corpus_report.py [--exercise 1|2] [--seed 1234] [--jobs 2] [--sandbox auto|bwrap|none] [-v]

Every file under tests/corpus/<suite>/{correct,buggy}/ is graded through the real entry point
(lumen_ex.harness.check.run_check, in a fresh workspace each). Buggy files declare in their header what the
first failing test must report (``# expect-kind:``, optional ``# expect-misconception:`` and
``# expect-test:``; see tests/e2e/test_corpus.py). Printed per exercise and in total:

- false passes: buggy files that pass (full marks);
- false fails: correct files that do not get full marks;
- correctly named: buggy files whose first failure names the declared misconception, of those that
  declare one (N of M);
- diagnosed as declared: buggy files whose first failure matches every declared field;
- catalogue coverage: the catalogue's misconception ids that some buggy file proves.

Exit status 0 when there is no false pass, no false fail and every declared diagnosis holds.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"
SUITES = {1: "attention", 2: "kv_cache"}

sys.path.insert(0, str(ROOT / "tests"))
from corpus_headers import headers  # noqa: E402


@dataclass
class Outcome:
    exercise: int
    path: Path
    correct: bool
    status: str = ""
    full_marks: bool = False
    first_test: str = ""
    kind: str | None = None
    misconception: str | None = None
    summary: str = ""
    run_top: str | None = None          # RunResult.misconceptions[0]["id"], if any
    seconds: float = 0.0
    declared: dict = field(default_factory=dict)

    @property
    def false_pass(self) -> bool:
        return not self.correct and self.status == "pass"

    @property
    def false_fail(self) -> bool:
        return self.correct and not (self.status == "pass" and self.full_marks)

    @property
    def named(self) -> bool | None:
        """Whether the declared misconception is named by the first failure (None: none declared)."""
        want = self.declared.get("expect-misconception")
        return None if want is None else self.misconception == want

    @property
    def as_declared(self) -> bool:
        d = self.declared
        return (self.status == "fail" and self.kind == d.get("expect-kind")
                and ("expect-misconception" not in d or self.misconception == d["expect-misconception"])
                and ("expect-test" not in d or self.first_test.endswith("::" + d["expect-test"])))


def grade_one(args: tuple[int, str, bool, int, str]) -> Outcome:
    exercise, path_s, correct, seed, sandbox = args
    from lumen_ex.core import catalog
    from lumen_ex.core.workspace import Workspace
    from lumen_ex.harness.check import run_check

    path = Path(path_s)
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="lumen-corpus-"))
    try:
        cat = catalog.load()
        ws = Workspace.create(tmp / "ws", cat)
        ex = cat.find(exercise)
        shutil.copyfile(path, ws.root / ex.dir / ex.file)
        result = run_check(exercise, workspace=ws.root, sandbox=sandbox, seed=seed, device="cpu", record=False)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = Outcome(exercise, path, correct, status=result.status.value,
                  full_marks=abs(result.score - result.max_score) < 1e-6, seconds=time.monotonic() - started,
                  declared={} if correct else headers(path))
    first = result.first_failure
    if first is not None:
        out.first_test = first.id
        if first.diagnosis is not None:
            out.kind, out.misconception, out.summary = first.diagnosis.kind, first.diagnosis.misconception, first.diagnosis.summary
    summary = result.misconceptions
    out.run_top = summary[0]["id"] if summary else None
    return out


def catalogue(exercise: int) -> dict[str, str]:
    import importlib

    return importlib.import_module(f"lumen_ex.graders.{SUITES[exercise]}.variants").CATALOGUE


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exercise", type=int, choices=sorted(SUITES), action="append")
    parser.add_argument("--seed", type=int, default=1234, help="run seed (the corpus tests use 1234)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--sandbox", default="auto")
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per file")
    args = parser.parse_args()
    exercises = args.exercise or sorted(SUITES)

    jobs = []
    for ex in exercises:
        for kind in ("correct", "buggy"):
            for path in sorted((CORPUS / SUITES[ex] / kind).glob("*.py")):
                jobs.append((ex, str(path), kind == "correct", args.seed, args.sandbox))
    started = time.monotonic()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        outcomes = list(pool.map(grade_one, jobs))
    elapsed = time.monotonic() - started

    ok = True
    totals = {"correct": 0, "buggy": 0, "false_pass": 0, "false_fail": 0, "named": 0, "declaring": 0, "as_declared": 0}
    for ex in exercises:
        mine = [o for o in outcomes if o.exercise == ex]
        correct = [o for o in mine if o.correct]
        buggy = [o for o in mine if not o.correct]
        declaring = [o for o in buggy if o.named is not None]
        named = [o for o in declaring if o.named]
        as_declared = [o for o in buggy if o.as_declared]
        false_pass = [o for o in buggy if o.false_pass]
        false_fail = [o for o in correct if o.false_fail]
        proven = {o.declared["expect-misconception"] for o in named}
        cat = catalogue(ex)
        print(f"exercise {ex} ({SUITES[ex]}): {len(correct)} correct, {len(buggy)} buggy submissions, seed {args.seed}")
        print(f"  false passes:           {len(false_pass)}" + "".join(f"\n    {o.path.name}" for o in false_pass))
        print(f"  false fails:            {len(false_fail)}" + "".join(f"\n    {o.path.name}: {o.first_test} {o.summary[:100]}" for o in false_fail))
        print(f"  correctly named:        {len(named)} of {len(declaring)} that declare a misconception")
        print(f"  diagnosed as declared:  {len(as_declared)} of {len(buggy)} (kind, misconception, first test)")
        missing = sorted(set(cat) - proven)
        print(f"  catalogue ids proven:   {len(proven & set(cat))} of {len(cat)}"
              + (f" (no corpus file names: {', '.join(missing)})" if missing else ""))
        for o in buggy:
            if o.named is False or not o.as_declared or args.verbose:
                mark = "ok " if o.as_declared else "BAD"
                print(f"    {mark} {o.path.name}: {o.status} first={o.first_test.split('::')[-1]} "
                      f"[{o.kind}/{o.misconception}] declared [{o.declared.get('expect-kind')}/"
                      f"{o.declared.get('expect-misconception')}] run-top={o.run_top}")
        ok = ok and not false_pass and not false_fail and len(as_declared) == len(buggy)
        for key, value in (("correct", len(correct)), ("buggy", len(buggy)), ("false_pass", len(false_pass)),
                           ("false_fail", len(false_fail)), ("named", len(named)), ("declaring", len(declaring)),
                           ("as_declared", len(as_declared))):
            totals[key] += value
    print(f"total: {totals['correct']} correct and {totals['buggy']} buggy graded in {elapsed:.0f} s; "
          f"false passes {totals['false_pass']}, false fails {totals['false_fail']}, correctly named "
          f"{totals['named']} of {totals['declaring']}, diagnosed as declared {totals['as_declared']} of {totals['buggy']}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

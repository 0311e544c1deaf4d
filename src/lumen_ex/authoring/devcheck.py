"""``lumen-ex dev check [PACK...]``: is this exercise pack ready to grade learners?

For every exercise of every pack given (default: the built-in pack), in this order:

1. the manifests: pack.toml and exercise.toml are valid, numbers and slugs unique across every pack
   in use, no file in an exercise folder is unlisted (core/catalog.py ``validate``);
2. the known mistakes: mistakes.py has a ``CATALOGUE`` of mistake ids; every buggy corpus file's
   header is valid and names a mistake from it (authoring/corpus.py);
3. grading, through the same harness, sandbox and record as ``lumen-ex grade`` (the files are laid
   out as a class of submissions and graded by classroom/scheduler.py):
   - the stub fails, with NotImplementedError;
   - the reference passes with full marks under every seed of ``seeds``, every scoring group used;
   - every corpus/correct file gets full marks; every corpus/buggy file fails, and its first failure
     has the kind, the named mistake and the test its header declares: under every seed of ``seeds``;
   - the files nearest the tolerance are graded under ``close_seeds`` as well
     (src/lumen_ex/authoring/close_seeds.py): the reference, every correct file that used at least
     ``CLOSE_SHARE`` of a tolerance under some seed (its tests' ``tolerance_used``: how near the line
     between pass and fail it stayed), and every buggy file whose first failure is a value
     difference within ``CLOSE_RATIO`` times the tolerance;
4. same bytes, same verdict: a file's verdict (status, score, each test's status, the first
   failure's kind and mistake, the notes on passing tests) is identical under every seed it was
   graded with, else the seeds it differs between are a problem;
5. every mistake of the exercise's own (CATALOGUE entries beyond the generic ones every suite
   shares) is named, by the first failure or a later one, in a buggy file that got its verdict.

Every grading goes through a warm batch (``lumen-ex grade``'s grading processes, forked workers,
kept pytest sessions): one for every file under every seed, each (file, seed) a student with a seed
of its own (the reference under the close seeds too), then one for the close seeds of the correct
and buggy files near the tolerance; a pack of 300 files under 5 seeds costs minutes, not hours.

The report counts the corpus verdicts; ``ok`` is False at the first problem (all are listed).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from lumen_ex.authoring.close_seeds import ALWAYS_CLOSE, is_close, tolerance_used
from lumen_ex.authoring.corpus import CorpusFile, corpus_files, did_you_mean, header_problems
from lumen_ex.authoring.report import Report, verdict, verdict_differences
from lumen_ex.classroom.batch_types import Finished, Progress
from lumen_ex.core import catalog as catalog_mod
from lumen_ex.core.catalog import Exercise
from lumen_ex.core.errors import CatalogError, UnknownExercise
from lumen_ex.core.exercise_modules import load as load_module
from lumen_ex.core.packs import add_to_path, builtin_root, discover, read_pack
from lumen_ex.core.results import DIAGNOSIS_KINDS, RunResult, Status
from lumen_ex.graders.support.mistakes import GENERIC_MISCONCEPTIONS

DEFAULT_SEEDS = (1, 2, 3)
DEFAULT_CLOSE_SEEDS = (4, 5)


def dev_check(roots: list[Path] | None = None, *, seeds: tuple[int, ...] = DEFAULT_SEEDS,
              close_seeds: tuple[int, ...] = DEFAULT_CLOSE_SEEDS, sandbox: str = "auto",
              jobs: int = 2, grade: bool = True, progress=None, only: tuple[str, ...] = ()) -> Report:
    """Validate the packs at ``roots`` (default: the built-in pack); see the module docstring.
    ``only``: just these exercises of them (numbers or slugs)."""
    roots = [Path(r).resolve() for r in (roots or [builtin_root()])]
    packs = [read_pack(r, builtin=r == builtin_root().resolve()) for r in roots]
    add_to_path([p.root for p in packs if not p.builtin])     # the grading processes must see them too
    close_seeds = tuple(s for s in close_seeds if s not in seeds)
    report = Report(packs, [], tuple(seeds), close_seeds)
    try:
        everything = catalog_mod.load()
    except CatalogError as exc:
        report.add("packs", str(exc))
        return report
    report.exercises = [ex for ex in everything.exercises if any(ex.root.parent == p.root for p in packs)]
    if only:
        wanted = [everything.find(key) for key in only]
        for ex in (ex for ex in wanted if ex not in report.exercises):
            raise UnknownExercise(f"exercise {ex.number} ({ex.slug}) is not in the pack checked "
                                  f"({', '.join(str(p.root) for p in packs)}) but in {ex.root.parent}",
                                  f"Name its pack's folder: lumen-ex dev check {ex.root.parent} -e {ex.number}")
        report.exercises = [ex for ex in report.exercises if ex in wanted]
    in_use = {p.name: p.root for p in discover()}   # a pack of the same name found first is graded in its place
    for pack in packs:
        for problem in catalog_mod.unlisted_folders(pack):
            report.add(pack.name, problem)
        if in_use.get(pack.name, pack.root) != pack.root:
            report.add(pack.name, f"{pack.root} is not the pack in use: the pack of the same name at {in_use[pack.name]} is "
                                  "found first (LUMEN_EX_PATH); check that folder instead, or take it off LUMEN_EX_PATH")
    mine = catalog_mod.Catalog(everything.version, tuple(report.exercises))
    for problem in catalog_mod.validate(mine):
        report.add("manifest", problem)
    known = {ex.dir: _catalogue(ex, report) for ex in report.exercises}
    for ex in report.exercises:
        ids = known[ex.dir]
        if ids is None:      # mistakes.py is reported already; its ids cannot be checked
            continue
        names = set(ids) | set(GENERIC_MISCONCEPTIONS) | set(DIAGNOSIS_KINDS)
        for key in sorted(set(ex.hint_for) - names):
            report.add(ex.dir, f"exercise.toml [hint_for] {key!r} is neither a known mistake (mistakes.py CATALOGUE, "
                               f"or a generic one) nor a diagnosis kind: correct the name, or remove it"
                               f"{did_you_mean(key, names)}")
    for ex in report.exercises:
        for item in corpus_files(ex):
            for problem in header_problems(item, known[ex.dir] or set()):
                report.add(item.label, problem)
    if grade and report.exercises and not any(p.where == "manifest" for p in report.problems):
        _grade_all(report, sandbox=sandbox, jobs=jobs, progress=progress)
        _same_verdict_at_every_seed(report)
        faulty = _report_faults(report)
        for ex in [ex for ex in report.exercises if ex.dir not in faulty]:   # no cascade of a fault
            own = set(known[ex.dir] or ()) - set(GENERIC_MISCONCEPTIONS)
            for mistake in sorted(own - report.named.get(ex.dir, set())):
                report.add(ex.dir, f"the known mistake {mistake!r} is named by no buggy corpus file: add one "
                                   "that makes it (# expect-misconception: ...), or remove it from CATALOGUE")
    return report


def _catalogue(ex: Exercise, report: Report) -> set[str] | None:
    try:
        cat = getattr(load_module(ex.root, "mistakes"), "CATALOGUE", None)
    except Exception as exc:  # noqa: BLE001  any error in the author's module is reported, not raised
        report.add(ex.dir, f"mistakes.py does not import: {type(exc).__name__}: {exc}")
        return None
    if not isinstance(cat, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in cat.items()):
        report.add(ex.dir, "mistakes.py needs CATALOGUE: a dict of mistake id -> the sentence a learner reads")
        return None
    return set(cat)


# -- grading -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Case:
    exercise: Exercise
    what: str                 # "stub", "reference", "correct", "buggy"
    path: Path
    item: CorpusFile | None = None

    @property
    def student(self) -> str:
        return f"{self.exercise.dir}--{self.what}--{self.path.stem}"


def _grade_all(report: Report, *, sandbox: str, jobs: int, progress) -> None:
    """Grade every case under every seed (the stub under the first only: it fails whatever the
    inputs), and the reference under the close seeds too, in one warm batch; then the correct and
    buggy files near the tolerance under the close seeds, in a second one."""
    cases = []
    for ex in report.exercises:
        cases += [_Case(ex, "stub", ex.stub_path), _Case(ex, "reference", ex.reference_path)]
        cases += [_Case(ex, item.kind, item.path, item) for item in corpus_files(ex)]
    scratch = Path(tempfile.mkdtemp(prefix="lumen-ex-dev-check-"))
    got: dict[str, list[RunResult | None]] = {}   # by case.student
    try:
        base = [(c, seed) for i, seed in enumerate(report.seeds) for c in cases if i == 0 or c.what != "stub"]
        # the reference is always close (close_seeds.py): its close seeds need no first round
        base += [(c, seed) for seed in report.close_seeds for c in cases if c.what in ALWAYS_CLOSE]
        _grade_round(report, scratch / "seeds", base, sandbox=sandbox, jobs=jobs, progress=progress, got=got)
        close = [c for c in cases if c.what not in ALWAYS_CLOSE and is_close(c.what, got.get(c.student, []))]
        _grade_round(report, scratch / "close-seeds", [(c, seed) for seed in report.close_seeds for c in close],
                     sandbox=sandbox, jobs=jobs, progress=progress, got=got)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _grade_round(report: Report, root: Path, batch: list[tuple[_Case, int]], *, sandbox: str, jobs: int,
                 progress, got: dict) -> None:
    """Grade each (case, seed) of ``batch`` in one warm batch, then judge them in that order."""
    if not batch:
        return
    docs = _grade_batch(root, batch, report.exercises, sandbox=sandbox, jobs=jobs, progress=progress)
    report.graded += len(batch)
    for case, seed in batch:
        result = docs.get(_student(case, seed))
        got.setdefault(case.student, []).append(result)
        _judge(report, case, result, seed)


def _same_verdict_at_every_seed(report: Report) -> None:
    """A file whose verdict changes with the seed is a problem, naming the seeds and what changed."""
    by_file: dict[str, list[dict]] = {}
    for entry in report.files:
        if entry.get("verdict") is not None:
            by_file.setdefault(entry["where"], []).append(entry)
    for where, entries in by_file.items():
        first = entries[0]
        for other in entries[1:]:
            changed = verdict_differences(first["verdict"], other["verdict"])
            if changed:
                report.add(where, f"the verdict depends on the seed: seed {first['seed']} vs {other['seed']}: "
                                  + "; ".join(changed))


def _student(case: _Case, seed: int) -> str:
    """The submission that grades ``case`` under ``seed`` (one student per file and seed)."""
    return f"{case.student}--seed-{seed}"


class _DeclaredProgress:
    """The batch's progress as dev check shows it: each grading said against what its file declares.

    A buggy file (or the stub) that fails is what it should be, not a failure: its line says "a fail
    as declared (kind and mistake: in the report)", and the running count is of gradings whose pass
    or fail is not what their file declares (a buggy file that passes, a correct file or the
    reference that does not, any error). The full judgement (kind, mistake, first failing test) comes
    after the batch, in the report: a line here never says a buggy file's diagnosis is right."""

    def __init__(self, inner: Progress, expected: dict[str, str]):
        self.inner, self.expected = inner, expected       # student -> "pass" or "fail"
        self.unexpected = 0

    # The plan, its notes and the check each grading process takes are not shown: the batch's
    # students are dev check's own (file x seed), its seed each student's, its notes about them.
    def planned(self, regraded: list[tuple[str, str, str]]) -> None:
        pass

    def notes(self, notes: list[str]) -> None:
        pass

    def started_check(self, student: str, exercise: Exercise) -> None:
        pass

    def begin(self, total: int, resumed: int, students: int, note: str) -> None:
        self.inner.begin(total, resumed, students, note)

    def finished(self, item: Finished) -> None:
        r, want = item.result, self.expected.get(item.student, "pass")
        got = f"{r.status.value} {r.score:g}/{r.max_score:g}"
        if r.status.value == want:
            said = f"{got}, a {want} as declared" + (" (kind and mistake: in the report)" if want == "fail" else "")
        else:
            self.unexpected += 1
            said = f"{got}, declared to {want}"
        self.inner.finished(replace(item, verdict=said, tally=f"{self.unexpected} with the wrong pass or fail"))

    def end(self) -> None:
        self.inner.end()


def _grade_batch(root: Path, batch: list[tuple[_Case, int]], exercises: list[Exercise], *, sandbox: str, jobs: int,
                 progress) -> dict[str, RunResult]:
    from lumen_ex.classroom.batch_types import GradeRequest
    from lumen_ex.classroom.scheduler import grade_class
    from lumen_ex.classroom.store import load_document, result_path

    subs = root / "submissions"
    for case, seed in batch:
        folder = subs / _student(case, seed) / case.exercise.dir
        folder.mkdir(parents=True)
        shutil.copyfile(case.path, folder / case.exercise.file)
    used = [ex for ex in exercises if any(c.exercise is ex for c, _ in batch)]
    seeds = {_student(case, seed): seed for case, seed in batch}
    req = GradeRequest(submissions=subs, out=root / "out", exercises=used, jobs=jobs, sandbox=sandbox,
                       unsafe=sandbox == "none", seed=batch[0][1], device="cpu", only_submitted=True,
                       student_seeds=seeds)
    expected = {_student(case, seed): "fail" if case.what in ("stub", "buggy") else "pass" for case, seed in batch}
    grade_class(req, _DeclaredProgress(progress, expected) if progress is not None else None)
    docs = {}
    for case, seed in batch:
        doc = load_document(result_path(root / "out", _student(case, seed), case.exercise))
        if doc is not None:
            docs[_student(case, seed)] = RunResult.from_dict(doc)
    return docs


def _exercise_fault(case: _Case, result: RunResult | None) -> tuple[tuple, list[str]] | None:
    """The fault of the exercise's own code that spoiled this grading, if any (harness/plugin.py
    ``author_fault``, harness/check.py ``suite_error``): (exercise dir, file, line, error) and the
    author's frames."""
    for t in result.tests if result is not None else ():
        d = t.diagnosis.details if t.diagnosis is not None and t.diagnosis.kind == "grader" else {}
        if d.get("exercise") == case.exercise.dir and d.get("file"):
            assert t.diagnosis is not None       # d is its details: {} matches no exercise
            key = (case.exercise.dir, str(d["file"]), d.get("line"), str(d.get("error") or t.diagnosis.summary))
            return key, [str(f) for f in d.get("frames") or []]
    return None


def _report_faults(report: Report) -> set[str]:
    """One problem per fault of an exercise's own code, with its file, line and whole message, and
    how many gradings it spoiled (which are not judged: their verdicts follow from it); the
    exercises that have one."""
    for (folder, file, line, error), fault in report.faults.items():
        spoiled = fault["spoiled"]
        at = f"{folder}/{file}" + (f" line {line}" if line else "")
        report.add(at, f"the exercise's own code fails: {error.strip()} (it spoiled {len(spoiled)} grading"
                       f"{'s' if len(spoiled) != 1 else ''}, e.g. {spoiled[0]}; fix it, then run dev check again)")
    return {key[0] for key in report.faults}


def _judge(report: Report, case: _Case, result: RunResult | None, seed: int) -> None:
    """Compare one grading with what the file must get; count its outcome, list any problem."""
    fault = _exercise_fault(case, result)
    if fault is not None:
        assert result is not None      # a fault is found in a result's tests
        entry = report.faults.setdefault(fault[0], {"spoiled": [], "frames": fault[1]})
        entry["spoiled"].append(f"{_where(case)} at seed {seed}")
        report.files.append({"exercise": case.exercise.number, "dir": case.exercise.dir, "where": _where(case),
                             "what": case.what, "seed": seed, "outcome": "exercise fault", "ok": False,
                             "got": _describe(result), "verdict": None})
        return
    before = len(report.problems)
    outcome = _verdict(report, case, result, seed)
    report.files.append({"exercise": case.exercise.number, "dir": case.exercise.dir, "where": _where(case),
                         "what": case.what, "seed": seed,
                         "outcome": outcome, "ok": len(report.problems) == before,
                         "got": _describe(result) if result is not None else None,
                         "verdict": verdict(result) if result is not None else None,
                         "tolerance_used": tolerance_used(result) if result is not None else None})


def _where(case: _Case) -> str:
    return case.item.label if case.item else f"{case.exercise.dir}/{case.path.name}"


def _verdict(report: Report, case: _Case, result: RunResult | None, seed: int) -> str:
    ex, where = case.exercise, _where(case)
    if result is None:
        report.add(where, f"no result was recorded (seed {seed})")
        return "no result"
    first = result.first_failure
    line = _describe(result)
    if case.what == "stub":
        ok = (result.status is Status.FAIL and first is not None and first.diagnosis is not None
              and "NotImplementedError" in (first.diagnosis.summary or first.message))
        if not ok:
            report.add(where, f"the stub must fail with NotImplementedError; got {line}")
        return "fails" if result.status is Status.FAIL else result.status.value
    if case.what in ("reference", "correct"):
        full = result.status is Status.PASS and abs(result.score - ex.max_score) < 1e-6
        if not full:
            report.add(where, f"must get full marks ({ex.max_score:g}) at seed {seed}; got {line}")
        elif case.what == "reference":
            groups = {t.group for t in result.tests}
            if groups != set(ex.points):
                report.add(where, f"the suite's scoring groups {sorted(groups)} differ from exercise.toml's "
                                  f"{sorted(ex.points)}")
        return "full marks" if full else result.status.value
    return _verdict_buggy(report, case, result, where, f"at seed {seed}: {line}")


def _verdict_buggy(report: Report, case: _Case, result: RunResult, where: str, line: str) -> str:
    assert case.item is not None       # a buggy file is a corpus file (_grade_all)
    ex, h, first = case.exercise, case.item.headers, result.first_failure
    if result.status is Status.PASS:
        report.add(where, f"FALSE PASS: {h.get('bug', 'a buggy file')} got {line}")
        return "false pass"
    diag = first.diagnosis if first is not None else None
    wrong = []
    if result.status is not Status.FAIL:
        wrong.append(f"status {result.status.value} (a grader error or time-out, not a failure)")
    if first is None or diag is None:    # diag is None whenever first is
        wrong.append("no diagnosis")
    else:
        if diag.kind != h.get("expect-kind"):
            wrong.append(f"kind {diag.kind!r}, declared {h.get('expect-kind')!r}")
        if "expect-misconception" in h and diag.misconception != h["expect-misconception"]:
            wrong.append(f"mistake {diag.misconception!r}, declared {h['expect-misconception']!r}")
        if "expect-misconception" in h and not diag.hint:
            wrong.append("a named mistake must come with its sentence as the hint")
        if "expect-test" in h and not first.id.endswith("::" + h["expect-test"]):
            wrong.append(f"first failing test {first.id}, declared {h['expect-test']}")
    if wrong:
        report.add(where, "declared verdict not met: " + "; ".join(wrong) + f" ({line})")
        return "wrong diagnosis"
    # A mistake is demonstrated when a buggy file that got its declared verdict has it named, by its
    # first failure or by a later test (a property check behind a value check that fails first).
    named = {t.diagnosis.misconception for t in result.tests
             if t.status is Status.FAIL and t.diagnosis is not None and t.diagnosis.misconception}
    report.named.setdefault(ex.dir, set()).update(named)
    return "fails as declared"


def _describe(result: RunResult) -> str:
    first = result.first_failure
    text = f"{result.status.value} {result.score:g}/{result.max_score:g}"
    if first is not None:
        d = first.diagnosis
        text += f", first failure {first.id}" + (f" [{d.kind}/{d.misconception}] {d.summary}" if d else "")
    return text

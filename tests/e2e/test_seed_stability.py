"""Same code, same verdict: every corpus submission gets the same status and score at every seed.

The seed chooses the hidden inputs (src/lumen_ex/graders/support/inputs.py), and nothing else may depend on it:
a verdict that flips between seeds is a verdict nobody can trust. Every corpus file (each built-in
exercise's corpus/correct and corpus/buggy, and the hostile attacks in tests/corpus/hostile) is graded under each of
SEEDS, through the real harness (lumen_ex.harness.check.check_here: a real pytest session of the hidden suite,
the real plugin, scoring and result record) against a real sandboxed worker, and the status, the
score and every test's status must be identical across the seeds.

Doing 5 x ~130 gradings the ordinary way (one ``lumen-ex check`` each, ~2 s on a 2-core machine,
almost all of it two torch imports) would take over 20 minutes. This test pays the imports once:

- the gradings run in a few warm grading processes ("shards", :func:`shard_main`), each of which
  imports torch, pytest and the harness once and then calls ``lumen_ex.harness.check.check_here`` for one job
  after another, like src/lumen_ex/classroom/grading_main.py does for ``lumen-ex grade``;
- every job's worker is launched before the job before it is graded, so its torch import overlaps
  with that grading (src/lumen_ex/classroom/grading_main.py and src/lumen_ex/learner/watch.py do the same);
- correct and buggy submissions run in the unisolated mode (``--sandbox none``: a separate worker
  process, the same verdicts as bwrap, tests/e2e/test_corpus.py compares the two), and one
  worker serves the seeds of one file: each seed is still a grading of its own (a new WorkerPool
  that loads the module, a new pytest session), but torch and the learner's module are imported
  once per file. None of these files keeps state between calls, so that changes no verdict;
  a worker that fails (a crash, a time-out, a bad reply) is replaced as in any check;
- hostile submissions run under bubblewrap with a fresh worker for every grading, as ``lumen-ex
  check`` would: they attack the worker, so no worker is reused for them. Two of them are graded
  on the subset of tests tests/sandbox/test_attacks.py uses for them (a hang costs a call's time limit per
  test, a full gc scan per call takes seconds): HOSTILE_SELECT.

It is marked slow; run it with ``pytest tests/e2e/test_seed_stability.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import BUILTIN, CORPUS, ROOT, bwrap_ok

SEEDS = (1, 2, 3, 1234, 2**31 - 1)
SHARDS = 3                       # grading processes, each dealt an equal share of the files
# Hostile files graded on a subset of the suite (see tests/sandbox/test_attacks.py): the verdict is the point.
HOSTILE_SELECT = {
    "frame_gc_search": "test_values or test_mask or test_causal_mask",
    "infinite_loop": "test_causal_mask_on_device or test_values",
}


@dataclass(frozen=True)
class Job:
    """One corpus file, its exercise, and how it is graded."""

    path: str          # relative to the repository's root
    exercise: int
    sandbox: str       # "none" or "bwrap"
    reuse: bool        # one worker for all seeds of this file
    select: str | None = None

    @property
    def name(self) -> str:
        return self.path.removesuffix(".py")


def corpus_jobs() -> list[Job]:
    """Every corpus file, with the way it is graded."""
    jobs = []
    for ex in BUILTIN.values():           # every exercise of the built-in pack, its own corpus
        for kind in ("correct", "buggy"):
            for p in sorted((ex.corpus_dir / kind).glob("*.py")):
                jobs.append(Job(str(p.relative_to(ROOT)), ex.number, "none", True))
    for p in sorted((CORPUS / "hostile").glob("*.py")):
        jobs.append(Job(str(p.relative_to(ROOT)), 1, "bwrap", False, HOSTILE_SELECT.get(p.stem)))
    return jobs


# -------------------------------------------------------------------------------------------------
# One grading process


def verdict(result) -> dict:
    """What must not depend on the seed: status, score, each test's status, and the first failure's
    diagnosis (its kind and named mistake: what a corpus header declares). The diagnoses of later
    failing tests are not compared: three exercise-1 buggy files name their mistake on some seeds
    only in a later test (a near-tie of a bfloat16 variant, a random mask that leaves a key column
    empty), which the first failure never depends on."""
    first = result.first_failure
    return {"status": result.status.value, "score": round(result.score, 6),
            "tests": [[t.id, t.status.value] for t in result.tests],
            "first": [first.id, first.diagnosis.kind, first.diagnosis.misconception]
            if first is not None and first.diagnosis is not None else None,
            "notes": {t.id: t.message for t in result.tests if t.status.value == "pass" and t.message}}


def _kept_worker(launched):
    """A harness Worker that survives the end of a check (so that the next seed reuses it) unless
    it failed: any failure (crash, time-out, bad reply) kills it for real, as in every check."""
    from lumen_ex.harness.client import Worker

    class KeptWorker(Worker):
        keep = True

        def _fail(self, *args, **kwargs):
            self.keep = False
            return super()._fail(*args, **kwargs)

        def kill(self) -> None:
            if not self.keep:
                super().kill()

        def release(self) -> None:
            self.keep = False
            self.kill()

    return KeptWorker(launched)


def grade_file(job: Job, workspace: Path, launched, launcher, seeds) -> list[dict]:
    """Grade ``job`` under every seed: one worker for all of them when ``job.reuse``, else a fresh
    one each (``launched`` serves the first seed)."""
    from lumen_ex.core import catalog
    from lumen_ex.harness.check import check_here, worker_spec

    ex = catalog.load().find(job.exercise)
    learner_file = workspace / ex.dir / ex.file
    kept = _kept_worker(launched) if job.reuse else None
    ahead = None if job.reuse else launched
    out = []
    try:
        for i, seed in enumerate(seeds):
            if kept is not None:
                first = kept if kept.keep else None      # None: check_here() launches a fresh one
            else:   # this seed's worker, and the next seed's launched now, to overlap its start-up
                first, ahead = ahead, (launcher.launch(worker_spec(ex, workspace, learner_file, "cpu"))
                                       if i + 1 < len(seeds) else None)
            started = time.monotonic()
            result = check_here(ex, workspace, learner_file, launcher, seed=seed, device="cpu",
                           select=job.select, first=first, lean=True)
            out.append({"seed": seed, "seconds": round(time.monotonic() - started, 3), **verdict(result)})
    finally:
        if kept is not None:
            kept.release()
        if ahead is not None:
            ahead.kill()
    return out


def prepare_workspace(job: Job, tmp: Path) -> Path:
    from conftest import workspace_with

    return workspace_with(tmp / job.name.replace("/", "-"), job.exercise, ROOT / job.path)


def shard_main(jobs_file: str, out_file: str) -> None:
    """A warm grading process: grade the jobs in ``jobs_file``, write the verdicts to ``out_file``.

    The worker of the next job is launched before the current job is graded."""
    import gc

    import torch

    from lumen_ex.core import catalog
    from lumen_ex.harness.check import worker_spec
    from lumen_ex.sandbox.select import HOST_LAUNCHERS

    torch.set_num_threads(1)      # the harness's tensors are tiny; a second thread only waits for a core
    spec = json.loads(Path(jobs_file).read_text())
    seeds, tmp = spec["seeds"], Path(tempfile.mkdtemp(prefix="lumen-seeds-"))
    jobs = [Job(**j) for j in spec["jobs"]]
    launchers = {name: cls() for name, cls in HOST_LAUNCHERS.items()}
    plan = [(job, prepare_workspace(job, tmp)) for job in jobs]

    def launch(job, root):
        ex = catalog.load().find(job.exercise)
        return launchers[job.sandbox].launch(worker_spec(ex, root, root / ex.dir / ex.file, "cpu"))

    results, ahead = {}, launch(*plan[0]) if plan else None
    for i, (job, root) in enumerate(plan):
        current, ahead = ahead, (launch(*plan[i + 1]) if i + 1 < len(plan) else None)
        started = time.monotonic()
        try:
            results[job.path] = grade_file(job, root, current, launchers[job.sandbox], seeds)
        except Exception as exc:  # noqa: BLE001  reported as this file's failure
            results[job.path] = [{"seed": None, "error": f"{type(exc).__name__}: {exc}"}]
        print(f"{job.path}: {time.monotonic() - started:.1f} s", flush=True)   # progress, in the shard's log
        Path(out_file).write_text(json.dumps(results))   # what is done so far survives a time-out
        gc.collect()
    if ahead is not None:
        ahead.kill()
    shutil.rmtree(tmp, ignore_errors=True)
    Path(out_file).write_text(json.dumps(results))


# -------------------------------------------------------------------------------------------------
# The test


def shards(jobs: list[Job], n: int) -> list[list[Job]]:
    """Every job dealt over ``n`` shards, round robin, the slow hostile ones first, so that the
    shards finish together (one shard of all the corpus files left the others idle for most of the
    run once the pack had six exercises)."""
    groups: list[list[Job]] = [[] for _ in range(max(n, 1))]
    ordered = sorted(jobs, key=lambda j: (j.reuse, j.select is None))     # hostile, slow selections first
    for i, job in enumerate(ordered):
        groups[i % len(groups)].append(job)
    return [g for g in groups if g]


def run_shards(jobs: list[Job], seeds, tmp: Path) -> dict[str, list[dict]]:
    """Grade ``jobs`` in SHARDS processes at once; every file's list of per-seed verdicts."""
    procs = []
    for i, group in enumerate(shards(jobs, SHARDS)):
        jobs_file, out_file = tmp / f"jobs{i}.json", tmp / f"out{i}.json"
        jobs_file.write_text(json.dumps({"seeds": list(seeds), "jobs": [j.__dict__ for j in group]}))
        code = (f"import sys; sys.path[:0] = [{str(Path(__file__).resolve().parent)!r}, {str(ROOT / 'tests')!r}]; "
                f"import test_seed_stability as t; t.shard_main({str(jobs_file)!r}, {str(out_file)!r})")
        log = open(tmp / f"shard{i}.log", "w")
        procs.append((subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=log, stderr=log,
                                       env={**os.environ, "OMP_NUM_THREADS": "1"}), out_file, log))
    results = {}
    try:
        for proc, out_file, log in procs:
            proc.wait(timeout=1800)
            log.close()
            assert proc.returncode == 0, Path(log.name).read_text()[-3000:]
            results.update(json.loads(out_file.read_text()))
    finally:
        for proc, _, _ in procs:   # our own shards, should one be left running after a failure
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


def flips(runs: list[dict]) -> list[str]:
    """What differs between the seeds' verdicts of one file (empty when they all agree)."""
    if any("error" in r for r in runs):
        return [r["error"] for r in runs if "error" in r]
    first, problems = runs[0], []
    for r in runs[1:]:
        for key in ("status", "score", "tests", "first", "notes"):
            if r[key] != first[key]:
                problems.append(f"seed {first['seed']} vs {r['seed']}: {key} "
                                + "; ".join(differences(first[key], r[key])))
    return problems


def differences(a, b) -> list[str]:
    """The parts of two verdict fields that differ: per test for test lists and note maps."""
    if isinstance(a, list) and isinstance(b, list) and a and isinstance(a[0], list):   # [[test id, status], ...]
        return [f"{x[0]}: {x[1]} -> {y[1]}" for x, y in zip(a, b) if x != y] or [f"{len(a)} -> {len(b)} tests"]
    if isinstance(a, dict):        # {test id: note}
        return [f"{t}: {a.get(t)!r} -> {b.get(t)!r}" for t in sorted(set(a) | set(b)) if a.get(t) != b.get(t)]
    return [f"{a} -> {b}"]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    if not bwrap_ok():
        pytest.skip("bubblewrap unavailable: the hostile files are graded under bwrap only")
    jobs = corpus_jobs()
    started = time.monotonic()
    results = run_shards(jobs, SEEDS, tmp_path_factory.mktemp("seeds"))
    return jobs, results, time.monotonic() - started


@pytest.mark.slow
def test_every_corpus_file_gets_one_verdict_at_every_seed(graded):
    jobs, results, seconds = graded
    assert len(jobs) >= 120 and len(SEEDS) >= 5
    assert set(results) == {j.path for j in jobs}
    problems = {path: flips(runs) for path, runs in results.items()}
    unstable = {path: p for path, p in problems.items() if p}
    stable = len(results) - len(unstable)
    gradings = sum(len(runs) for runs in results.values())
    print(f"\nseed stability: {len(results)} files x {len(SEEDS)} seeds = {gradings} gradings, "
          f"{stable} files with identical verdicts at every seed, {seconds:.0f} s")
    assert not unstable, "verdicts that depend on the seed:\n" + "\n".join(
        f"  {path}: {'; '.join(p)}" for path, p in sorted(unstable.items()))


@pytest.mark.slow
def test_float32_rounding_is_noted_exactly_where_it_happens(graded):
    """Correct files that compute inside in float32 (header ``# expect-note: <test ids>``) pass with
    the float32-rounding note on exactly those tests at every seed; the others carry no note."""
    from corpus_headers import headers

    from lumen_ex.graders.support.expect import FLOAT32_ROUNDING_NOTE

    jobs, results, _ = graded
    problems = []
    for job in jobs:
        if "/correct/" not in job.path:
            continue
        wanted = headers(ROOT / job.path).get("expect-note", "").split()
        for run in results[job.path]:
            noted = sorted(t.split("::")[-1] for t, text in run.get("notes", {}).items()
                           if text == FLOAT32_ROUNDING_NOTE)
            if run.get("status") != "pass" or noted != sorted(wanted):
                problems.append(f"{job.path} seed {run.get('seed')}: {run.get('status')}, notes on {noted}, "
                                f"expected on {sorted(wanted)}")
    assert not problems, "\n".join(problems)
    assert sum(1 for j in jobs if headers(ROOT / j.path).get("expect-note")) >= 3

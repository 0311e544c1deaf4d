"""Batch grading throughput: `lumen-ex grade` beside the naive loop of one `lumen-ex check` per check.

    python bench/grade_throughput.py [--students 40] [--jobs 2] [--sandbox bwrap] [--exercise N ...]
                                     [--no-threads] [--memory-jobs 1,2,4]

Generates a class of --students submissions (each a workspace holding both exercise files), mixing
correct solutions (reference/ and tests/corpus/*/correct), buggy ones (tests/corpus/*/buggy) and
hostile ones (tests/corpus/hostile, exercise 1; the slowest attacks, which spend the whole run time
limit, are left out so that the benchmark stays short). Then, in the same run, on the same machine,
with the same seed for every check:

1. naive: one `lumen-ex check N --format json` subprocess per student x exercise, one after another;
2. batch: `lumen-ex grade CLASS --jobs J` (warm grading processes, the next worker started during
   the current tests, J at a time);
3. threads (unless --no-threads): the alternative design, J threads calling lumen_ex.harness.check.run_check
   in one process, to compare threads with processes.

It prints submissions (students) per minute for each and the ratios, and checks that the batch gave
every check the same verdict and score as the naive loop. It also prints the batch's cost per
check and what a class of 1,000 submissions would take at that cost, and, for each N of
--memory-jobs, the peak memory (PSS) of a `lumen-ex grade --jobs N` run (the command and every
process under it, sampled from /proc), so that an instructor can choose N. Numbers vary with the machine's load:
compare the ratio, measured in one run, not the absolute rates.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import CORPORA, LUMEN_EX, ROOT, TreeMemory

CORPUS = ROOT / "tests" / "corpus"
HOSTILE = ["sys_exit", "kill_parent", "fake_reply_frame", "monkeypatch_comparisons", "subclass_eq_true",
           "hang_at_import", "atexit_exit", "forbidden_alias", "tamper_worker_replies", "frame_gc_search"]
SEED = 11


def make_class(root: Path, n: int) -> dict[str, str]:
    """``n`` student workspaces under ``root``; returns student -> kind (correct, buggy, hostile)."""
    from lumen_ex.core import catalog
    from lumen_ex.core.workspace import Workspace

    cat = catalog.load()
    ex1, ex2 = cat.find(1), cat.find(2)
    correct1 = [ex1.reference_path, *sorted((CORPORA["attention"] / "correct").glob("*.py"))]
    correct2 = [ex2.reference_path, *sorted((CORPORA["kv_cache"] / "correct").glob("*.py"))]
    buggy1 = sorted((CORPORA["attention"] / "buggy").glob("*.py"))
    buggy2 = sorted((CORPORA["kv_cache"] / "buggy").glob("*.py"))
    hostile = [CORPUS / "hostile" / f"{name}.py" for name in HOSTILE]
    kinds = ["correct", "buggy", "buggy", "hostile", "correct", "buggy", "buggy", "correct", "hostile", "buggy"]
    pools = {"correct": (itertools.cycle(correct1), itertools.cycle(correct2)),
             "buggy": (itertools.cycle(buggy1), itertools.cycle(buggy2)),
             "hostile": (itertools.cycle(hostile), itertools.cycle(buggy2 + correct2))}
    out = {}
    for i in range(n):
        kind = kinds[i % len(kinds)]
        ws = Workspace.create(root / f"student{i:02d}", cat)
        first, second = pools[kind]
        shutil.copyfile(next(first), ws.root / ex1.path)
        shutil.copyfile(next(second), ws.root / ex2.path)
        out[ws.root.name] = kind
    return out


def naive(root: Path, students: list[str], exercises: list[str], sandbox: str) -> tuple[float, dict]:
    verdicts = {}
    started = time.perf_counter()
    for student in students:
        for ex in exercises:
            proc = subprocess.run([LUMEN_EX, "check", ex, "--workspace", str(root / student), "--sandbox", sandbox,
                                   "--format", "json", "--seed", str(SEED)], capture_output=True, text=True)
            if proc.returncode not in (0, 1, 3):
                raise SystemExit(f"lumen-ex check {ex} for {student} exited {proc.returncode}: {proc.stderr}")
            doc = json.loads(proc.stdout)
            verdicts[(student, doc["exercise"]["number"])] = (doc["status"], round(doc["score"], 3))
    return time.perf_counter() - started, verdicts


def batch(root: Path, exercises: list[str], sandbox: str, jobs: int, memory: list | None = None) -> tuple[float, dict]:
    out = Path(tempfile.mkdtemp(prefix="lumen-bench-grade-"))
    args = [LUMEN_EX, "grade", str(root), "--out", str(out), "--jobs", str(jobs), "--sandbox", sandbox,
            "--seed", str(SEED)]
    for ex in exercises:
        args += ["--exercise", ex]
    started = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = TreeMemory(proc.pid)
    stdout, stderr = proc.communicate()
    elapsed = time.perf_counter() - started
    peak = sampler.stop()
    if memory is not None:
        memory.append(peak)
    proc.stdout, proc.stderr = stdout, stderr
    if proc.returncode not in (0, 3):
        raise SystemExit(f"lumen-ex grade exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr}")
    verdicts = {}
    for path in (out / "results").glob("*/*.json"):
        # DIR/results/<key>/<exercise dir>.json is a result document; beside it are its record
        # <exercise dir>.grading.json (what was graded: the store's fingerprint), submission.json and,
        # with --due, submitted.json, none of which is a result
        if path.name.endswith(".grading.json") or path.name in ("submission.json", "submitted.json"):
            continue
        doc = json.loads(path.read_text())
        verdicts[(path.parent.name, doc["exercise"]["number"])] = (doc["status"], round(doc["score"], 3))
    shutil.rmtree(out, ignore_errors=True)
    return elapsed, verdicts


def threads(root: Path, students: list[str], exercises: list[str], sandbox: str, jobs: int) -> tuple[float, dict, str]:
    """The same checks in one fresh process (its start-up and torch import counted), ``jobs`` threads."""
    verdicts_file = Path(tempfile.mkdtemp(prefix="lumen-bench-threads-")) / "verdicts.json"
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--threads-of", str(root), "--jobs", str(jobs),
                           "--sandbox", sandbox, "--verdicts", str(verdicts_file),
                           *(f"--exercise={ex}" for ex in exercises)], capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    trouble = [line for line in (proc.stdout + proc.stderr).splitlines() if "Error" in line]
    if proc.returncode != 0:
        trouble.append(f"the threads process exited {proc.returncode}: {proc.stderr.strip()[-200:]}")
    verdicts = {}
    if verdicts_file.exists():
        verdicts = {(s, int(n)): tuple(v) for s, n, v in json.loads(verdicts_file.read_text())}
    shutil.rmtree(verdicts_file.parent, ignore_errors=True)
    return elapsed, verdicts, (trouble[-1][:160] if trouble else "")


def threads_child(root: Path, exercises: list[str], sandbox: str, jobs: int, verdicts_file: Path) -> None:
    from lumen_ex.harness.check import run_check

    def one(item):
        student, ex = item
        try:
            r = run_check(ex, workspace=root / student, sandbox=sandbox, seed=SEED, record=False)
        except Exception as exc:  # noqa: BLE001  pytest is not thread-safe: record what happened
            return student, int(ex), (f"crashed: {type(exc).__name__}", 0.0)
        return student, r.exercise["number"], (r.status.value, round(r.score, 3))

    students = sorted(p.name for p in root.iterdir() if p.is_dir())
    with ThreadPoolExecutor(jobs) as pool:
        verdicts = list(pool.map(one, [(s, ex) for s in students for ex in exercises]))
    verdicts_file.write_text(json.dumps(verdicts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=40)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--sandbox", default="bwrap")
    parser.add_argument("--exercise", action="append", default=None)
    parser.add_argument("--no-threads", action="store_true")
    parser.add_argument("--memory-jobs", default="", help="also grade the class with each of these --jobs "
                        "(comma-separated) and print each run's peak memory")
    parser.add_argument("--no-naive", action="store_true", help="skip the naive loop (verdicts are then "
                        "compared with the batch's)")
    parser.add_argument("--threads-of", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--verdicts", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    exercises = args.exercise or ["1", "2"]
    if args.threads_of is not None:
        return threads_child(args.threads_of, exercises, args.sandbox, args.jobs, args.verdicts)
    root = Path(tempfile.mkdtemp(prefix="lumen-bench-class-"))
    kinds = make_class(root, args.students)
    students = sorted(kinds)
    mix = {k: sum(v == k for v in kinds.values()) for k in ("correct", "buggy", "hostile")}
    print(f"class: {len(students)} submissions ({mix['correct']} correct, {mix['buggy']} buggy, "
          f"{mix['hostile']} hostile), exercises {', '.join(exercises)}, sandbox {args.sandbox}, "
          f"{len(students) * len(exercises)} checks", flush=True)
    peaks: list[int] = []
    batch_s, batch_v = batch(root, exercises, args.sandbox, args.jobs, peaks)
    print(f"batch  lumen-ex grade --jobs {args.jobs}: {batch_s:7.1f} s, peak memory {peaks[0] / 2**20:,.0f} MiB",
          flush=True)
    if args.no_naive:
        naive_s, naive_v = None, batch_v
    else:
        naive_s, naive_v = naive(root, students, exercises, args.sandbox)
        print(f"naive  lumen-ex check per check:  {naive_s:7.1f} s", flush=True)
    thread_s, thread_v, thread_trouble = (None, {}, "") if args.no_threads else \
        threads(root, students, exercises, args.sandbox, args.jobs)
    if thread_s is not None:
        print(f"threads run_check x {args.jobs} in one process: {thread_s:7.1f} s", flush=True)
    rate = lambda s: 60.0 * len(students) / s  # noqa: E731
    differ = sorted(k for k in naive_v if batch_v.get(k) != naive_v[k])
    ratio = (lambda s: f"ratio {naive_s / s:5.2f} x the naive loop") if naive_s else (lambda s: "")  # noqa: E731
    reference = "the batch" if args.no_naive else "the naive loop"
    print()
    if naive_s:
        print(f"naive loop   {rate(naive_s):7.2f} submissions/min")
    print(f"lumen-ex grade --jobs {args.jobs} {rate(batch_s):7.2f} submissions/min   {ratio(batch_s)}")
    if thread_s is not None:
        wrong = sorted(k for k in naive_v if thread_v.get(k) != naive_v[k])
        print(f"threads x {args.jobs}    {rate(thread_s):7.2f} submissions/min   {ratio(thread_s)} "
              f"(in-process threads, for comparison; {len(naive_v) - len(wrong)} of {len(naive_v)} verdicts "
              f"identical to {reference}" + (f"; {thread_trouble}" if thread_trouble else "") + ")")
        if wrong:
            print(f"  threads differ on {wrong[:4]}: " + "; ".join(
                f"{thread_v.get(k)} instead of {naive_v[k]}" for k in wrong[:4]))
    checks = len(students) * len(exercises)
    per_check = batch_s / checks
    print(f"batch cost per check (--jobs {args.jobs})   {per_check:7.3f} s of wall time; a class of 1,000 submissions x "
          f"{len(exercises)} exercises: about {per_check * 1000 * len(exercises) / 60:,.0f} min at this rate")
    for n in [int(x) for x in args.memory_jobs.split(",") if x.strip()]:
        used: list[int] = []
        seconds, _ = batch(root, exercises, args.sandbox, n, used)
        print(f"lumen-ex grade --jobs {n:<2}  peak memory {used[0] / 2**20:7,.0f} MiB   "
              f"{rate(seconds):7.2f} submissions/min", flush=True)
    if not args.no_naive:
        print(f"verdicts: {len(naive_v) - len(differ)} of {len(naive_v)} checks identical between "
              f"the batch and the naive loop" + (f"; differing: {differ[:6]}" if differ else ""))
    shutil.rmtree(root, ignore_errors=True)
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()

"""How fast `lumen-ex watch` answers a save of a FAILING file, for every exercise, measured in one run.

    python bench/failing_rechecks.py [--via watch|playground|check] [--sandbox bwrap|none] [--typing S]
                                     [--per-exercise 8] [--passing 3] [-e 5] [--quick] [--load]

``--quick`` saves each file at once after the last result, without waiting for the worker kept in
advance: a learner who saves again and again. ``--load`` measures beside one other grading job (a
`lumen-ex dev check` with two grading processes, run again and again): a laptop that is busy too.

``--via playground`` measures the same files through a `lumen-ex serve` process instead: each one
posted as the editor's text (Ctrl+Enter), from the request to the result event
(bench/playground_latency.py ``Server``). ``--via check`` types `lumen-ex check N` in a terminal
again and again: the command itself, answered by the background server the first check starts
(src/lumen_ex/learner/check_server.py), process start and rendering included. The command is run the
moment the file is written (the server, which grades a save at once, has the least head start), or
``--typing S`` seconds later (a learner going from the editor to the terminal).

A learner spends most of their time on failing checks, so this saves each exercise's buggy corpus
files (src/lumen_ex/exercises/<NN-slug>/corpus/buggy/, the first --per-exercise of them in name
order) into a watch session one after another, then the reference --passing times, and prints per
exercise the median and the worst failing re-check, the median passing one and their ratio.
Latency is from just before the file is written to the RunResult (inotify, debounce, the worker
kept in advance, the whole hidden suite; rendering is not counted). Before each save the bench
waits until the worker kept in advance is ready, as when a learner takes a few seconds to edit.

Target (issue "The learner's loop"): failing re-checks at most 0.5 s median, 1 s at worst, and a
failing check at most 1.5x a passing one, for every exercise.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import statistics
import sys
import time
from pathlib import Path

from common import reference_workspace


def write(path: Path, text: str) -> None:
    with open(path, "w") as f:   # as an editor that saves in place does: one close-after-write event
        f.write(text)


def measure(ex, files: list[Path], passing: int, sandbox: str, pause: bool = True) -> tuple[list[float], list[float], list[str]]:
    from lumen_ex.learner.watch import WatchSession

    ws = reference_workspace()
    session = WatchSession(str(ex.number), workspace=ws, sandbox=sandbox, seed=1, record=False)
    session.check_once()                       # the start of a watch: not counted
    changes = session.wait_for_change()
    failing, passed, statuses = [], [], []
    reference = ex.reference_path.read_text()
    try:
        for text, into in [*((f.read_text(), failing) for f in files), *((reference, passed),) * passing]:
            if pause:
                if not session.wait_worker(180):
                    raise SystemExit("the worker kept in advance did not start")
                time.sleep(0.2)
            if into is passed:                 # the same text again is no change: alternate a comment
                text += f"\n# save {len(passed)}\n"
            t0 = time.perf_counter()
            write(session.file, text)
            next(changes)
            result = session.check_once()
            into.append(time.perf_counter() - t0)
            statuses.append(result.status.value)
    finally:
        changes.close()
        session.close()
    return failing, passed, statuses


def measure_playground(ex, files: list[Path], passing: int, sandbox: str, pause: bool = True):
    from playground_latency import Server
    from watch_latency import wait_idle

    server = Server(reference_workspace(), sandbox)
    failing, passed, statuses = [], [], []
    reference = ex.reference_path.read_text()
    try:
        server.call("GET", f"/api/exercises/{ex.slug}")          # the page opens the exercise: it warms
        wait_idle(server.proc.pid)
        server.check(reference, ex.slug)                        # the first check: not counted
        for text, into in [*((f.read_text(), failing) for f in files), *((reference, passed),) * passing]:
            if pause:
                wait_idle(server.proc.pid)
            if into is passed:
                text += f"\n# save {len(passed)}\n"
            elapsed, status = server.check(text, ex.slug)
            into.append(elapsed)
            statuses.append(status)
    finally:
        server.stop()
    return failing, passed, statuses


# `lumen-ex check`'s exit status: the result's status (src/lumen_ex/core/results.py RunResult.exit_code).
EXIT_STATUS = {0: "pass", 1: "fail"}


def measure_check(ex, files: list[Path], passing: int, sandbox: str, pause: bool = True, typing: float = 0.0):
    import shutil
    import subprocess
    import tempfile

    from common import LUMEN_EX
    from watch_latency import wait_idle

    from lumen_ex.learner import check_server

    ws = reference_workspace()
    runtime = Path(tempfile.mkdtemp(prefix="lumen-bench-run-"))
    env = {**os.environ, "LUMEN_EX_CHECK_SERVER": "on", "CI": "", "XDG_RUNTIME_DIR": str(runtime), "COLUMNS": "100"}
    command = [LUMEN_EX, "check", str(ex.number), "--workspace", str(ws), "--sandbox", sandbox]
    failing, passed, statuses = [], [], []
    reference = ex.reference_path.read_text()
    target = ws / ex.dir / ex.file
    try:
        subprocess.run(command, env=env, capture_output=True)  # cold: starts the server; not counted
        subprocess.run(command, env=env, capture_output=True)  # the server's first check: not counted
        log = "".join(p.read_text() for p in runtime.glob("lumen-ex/*.log"))
        server = int(re.search(r"\[(\d+)\] serving", log).group(1))
        for text, into in [*((f.read_text(), failing) for f in files), *((reference, passed),) * passing]:
            if pause:
                wait_idle(server)                              # the learner edits: the next worker gets ready
            write(target, text)
            time.sleep(typing)                                 # the learner goes to the terminal (0: at once)
            t0 = time.perf_counter()
            proc = subprocess.run(command, env=env, capture_output=True, text=True)   # the text a learner reads
            into.append(time.perf_counter() - t0)
            statuses.append(EXIT_STATUS.get(proc.returncode, f"exit {proc.returncode}"))
    finally:
        check_server.stop_all(runtime / "lumen-ex")
        shutil.rmtree(runtime, ignore_errors=True)
    return failing, passed, statuses


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--via", choices=("watch", "playground", "check"), default="watch")
    parser.add_argument("--sandbox", default=None, help="bwrap or none (default: bwrap where it works)")
    parser.add_argument("--per-exercise", type=int, default=8, help="buggy files saved per exercise")
    parser.add_argument("--passing", type=int, default=3, help="saves of the reference per exercise")
    parser.add_argument("-e", "--exercise", action="append", help="only these exercises (repeatable)")
    parser.add_argument("--quick", action="store_true",
                        help="save again at once, without waiting for the worker kept in advance")
    parser.add_argument("--typing", type=float, default=0.0,
                        help="--via check: seconds between the save and the command (default 0: typed at once)")
    parser.add_argument("--load", action="store_true",
                        help="measure beside one other grading job (`lumen-ex dev check -j 2`, again and again)")
    args = parser.parse_args()
    from lumen_ex.core import catalog
    from lumen_ex.sandbox.bwrap import BwrapLauncher

    sandbox = args.sandbox or ("bwrap" if BwrapLauncher.availability().ok else "none")
    cat = catalog.load(environ={})
    chosen = [cat.find(e) for e in args.exercise] if args.exercise else list(cat.exercises)
    how = {"watch": measure, "playground": measure_playground, "check": measure_check}[args.via]
    shown = {"watch": "`lumen-ex watch`", "playground": "the playground (`lumen-ex serve`)",
             "check": "`lumen-ex check` again (the background server)"}[args.via]
    when = "saved again at once" if args.quick else "saved once the worker kept in advance is ready"
    if args.via == "check":
        how = functools.partial(measure_check, typing=args.typing)
        when += f", the command {args.typing:g} s after the save" if args.typing else ", the command at once"
    load = Load(sandbox) if args.load else None
    if load is not None:
        when += ", beside one other grading job"
    print(f"failing re-checks in {shown} (--sandbox {sandbox}, {when}), seconds")
    print(f"{'exercise':<22}{'files':>6}{'fail median':>13}{'fail worst':>12}{'pass median':>13}{'fail/pass':>11}")
    try:
        for ex in chosen:
            files = sorted(ex.corpus_dir.glob("buggy/*.py"))[: args.per_exercise]
            failing, passing, statuses = how(ex, files, args.passing, sandbox, pause=not args.quick)
            if statuses[len(files):] != ["pass"] * args.passing:
                raise SystemExit(f"{ex.slug}: the reference did not pass: {statuses}")
            fail_median, pass_median = statistics.median(failing), statistics.median(passing)
            print(f"{ex.dir:<22}{len(files):>6}{fail_median:>13.3f}{max(failing):>12.3f}{pass_median:>13.3f}"
                  f"{fail_median / pass_median:>11.2f}" + (f"{os.getloadavg()[0]:>8.1f} load" if load else ""),
                  flush=True)
    finally:
        if load is not None:
            load.stop()
    print("target: failing median <= 0.5 s, worst <= 1 s, fail/pass <= 1.5")


class Load:
    """One other grading job beside the measurements (``--load``): `lumen-ex dev check` of exercise
    1's corpus with two grading processes at once, started again whenever it ends, until stopped.
    The one-minute load average is printed after each exercise."""

    def __init__(self, sandbox: str) -> None:
        import subprocess

        from common import LUMEN_EX

        command = " ".join([LUMEN_EX, "dev", "check", "-e", "1", "-j", "2", "--sandbox", sandbox,
                            "--seeds", "1,2,3,4,5,6,7,8", "--close-seeds", "''"])
        self.proc = subprocess.Popen(["bash", "-c", f"while true; do {command}; done"], start_new_session=True,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(20)      # its grading processes and workers at work before the first measurement

    def stop(self) -> None:
        import signal
        import subprocess

        os.killpg(self.proc.pid, signal.SIGTERM)      # dev check stops its grading processes and workers
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()

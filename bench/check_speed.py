"""How long `lumen-ex check 1` takes on a correct solution, beside `python -c "import torch"`.

    python bench/check_speed.py [--sandbox auto|bwrap|none] [--runs 5]

Target (issue 2): the cold check takes at most 1.5x the bare torch import, measured in the same run.
Then the same command again and again with the background server on (src/lumen_ex/learner/check_server.py,
in a private runtime folder, stopped at the end): what a learner who types `lumen-ex check 1` a second
time waits, after a pause in which the server is idle (the learner reads); then checks of --other and
of the first exercise in turn, each one another exercise than the last (the server's next session,
its workers forked from the zygote it keeps). Every number is a median of --runs runs after one
warm-up run (for the warm path, after the cold check that starts the server).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

from common import LUMEN_EX, import_torch_seconds, median_of, reference_workspace, timed
from watch_latency import wait_idle

from lumen_ex.learner import check_server


def _log(runtime: Path) -> str:
    return "".join(p.read_text() for p in runtime.glob("lumen-ex/*.log"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sandbox", default="auto")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--exercise", default="1")
    parser.add_argument("--other", default="2", help="the exercise checked in turn with --exercise")
    args = parser.parse_args()
    ws = reference_workspace()
    torch_s = import_torch_seconds(args.runs)
    check = [LUMEN_EX, "check", args.exercise, "--workspace", str(ws), "--sandbox", args.sandbox, "--seed", "1"]
    check_s = median_of(args.runs, lambda: timed(check))
    print(f"python -c 'import torch'        {torch_s:6.2f} s  (median of {args.runs})")
    print(f"lumen-ex check {args.exercise} --sandbox {args.sandbox:<5} {check_s:6.2f} s  (median of {args.runs}, correct solution)")
    print(f"ratio                           {check_s / torch_s:6.2f} x  (target <= 1.5 x)")
    # The warm path serves host sandboxes only (a docker check is a container of its own): where
    # `auto` means docker, the warm figure is bwrap's.
    host = args.sandbox if args.sandbox in ("bwrap", "none") else "bwrap"
    check = [*check[:check.index("--sandbox") + 1], host, *check[check.index("--sandbox") + 2:]]
    runtime = Path(tempfile.mkdtemp(prefix="lumen-bench-run-"))
    warm_env = {**os.environ, "LUMEN_EX_CHECK_SERVER": "on", "CI": "", "XDG_RUNTIME_DIR": str(runtime)}
    try:
        timed(check, env=warm_env)                      # cold: starts the server
        deadline = time.monotonic() + 120
        while "serving" not in _log(runtime) and time.monotonic() < deadline:
            time.sleep(0.1)
        server = int(re.search(r"\[(\d+)\] serving", _log(runtime)).group(1))

        def again() -> float:
            wait_idle(server)        # as a learner reads the last result: the next worker gets ready
            return timed(check, env=warm_env)

        warm_s = median_of(args.runs, again)
        turns = [[*check[:2], exercise, *check[3:]] for exercise in (args.other, args.exercise)]

        def switch() -> float:
            wait_idle(server)
            turns.reverse()
            return timed(turns[-1], env=warm_env)

        switch_s = median_of(args.runs, switch)
    finally:
        check_server.stop_all(runtime / "lumen-ex")
        shutil.rmtree(runtime, ignore_errors=True)
    print(f"the same check again (warm)     {warm_s:6.2f} s  (median of {args.runs}, the background server, --sandbox {host})")
    print(f"warm / cold                     {warm_s / check_s:6.2f} x")
    print(f"another exercise (warm)         {switch_s:6.2f} s  (median of {args.runs}, checks of {args.other} and "
          f"{args.exercise} in turn)")


if __name__ == "__main__":
    main()

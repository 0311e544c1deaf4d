"""How long `lumen-ex check 1 --sandbox docker` takes on a correct solution, beside `python -c "import torch"`.

    python bench/docker_check.py [--runs 3] [--exercise 1]

Target (issue 3): at most 1.8x the bare torch import, with a warm image, measured in the same run.
The two commands are timed alternately (after one warm-up run of each), so that load from other
processes on the machine weighs on both alike; each number is the median of --runs runs.
The grader image must be built and current (`lumen-ex image build`).
"""

from __future__ import annotations

import argparse
import statistics
import sys

from common import LUMEN_EX, PYTHON, reference_workspace, timed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--exercise", default="1")
    args = parser.parse_args()

    from lumen_ex.sandbox.docker import availability

    avail = availability()
    if not avail.ok:
        sys.exit(f"docker sandbox unavailable: {avail.reason}. {avail.install}")
    ws = reference_workspace()
    check = [LUMEN_EX, "check", args.exercise, "--workspace", str(ws), "--sandbox", "docker", "--seed", "1"]
    torch = [PYTHON, "-c", "import torch"]
    timed(torch), timed(check)                       # warm the page cache and the image; not counted
    torch_s, check_s = [], []
    for _ in range(args.runs):
        torch_s.append(timed(torch))
        check_s.append(timed(check))
    t, c = statistics.median(torch_s), statistics.median(check_s)
    runs = f"median of {args.runs}"
    print(f"python -c 'import torch'              {t:6.2f} s  ({runs}: {_list(torch_s)})")
    print(f"lumen-ex check {args.exercise} --sandbox docker     {c:6.2f} s  ({runs}: {_list(check_s)}, correct solution)")
    print(f"ratio                                 {c / t:6.2f} x  (target <= 1.8 x)")


def _list(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


if __name__ == "__main__":
    main()

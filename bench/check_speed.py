"""How long `lumen-ex check 1` takes on a correct solution, beside `python -c "import torch"`.

    python bench/check_speed.py [--sandbox auto|bwrap|none] [--runs 5]

Target (issue 2): the check takes at most 1.5x the bare torch import, measured in the same run.
Both numbers are medians of --runs runs after one warm-up run.
"""

from __future__ import annotations

import argparse

from common import LUMEN_EX, import_torch_seconds, median_of, reference_workspace, timed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sandbox", default="auto")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--exercise", default="1")
    args = parser.parse_args()
    ws = reference_workspace()
    torch_s = import_torch_seconds(args.runs)
    check = [LUMEN_EX, "check", args.exercise, "--workspace", str(ws), "--sandbox", args.sandbox, "--seed", "1"]
    check_s = median_of(args.runs, lambda: timed(check))
    print(f"python -c 'import torch'        {torch_s:6.2f} s  (median of {args.runs})")
    print(f"lumen-ex check {args.exercise} --sandbox {args.sandbox:<5} {check_s:6.2f} s  (median of {args.runs}, correct solution)")
    print(f"ratio                           {check_s / torch_s:6.2f} x  (target <= 1.5 x)")


if __name__ == "__main__":
    main()

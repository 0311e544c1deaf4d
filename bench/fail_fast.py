"""How long a file that does not parse, one whose function hangs, or one whose function ends its own
process at every call takes to report, beside a passing check of the reference, measured in the
same run.

    python bench/fail_fast.py [--sandbox auto|bwrap|none] [--runs 3]

Targets (issue 9): a syntax error is reported in about the time of a passing check (ratio near
1x, once, with its line); a hanging function costs one call's time limit (the catalogue's
call_seconds), not the run's, so its check takes about a passing check plus that limit. A
function that crashes its worker at every call (os._exit here; a segfault or an out-of-memory kill
alike) gets a new worker for every test: under bwrap each one is forked from a zygote the check
starts at the first crash (src/lumen_ex/sandbox/select.py replacing), not a torch import per test.
"""

from __future__ import annotations

import argparse
import shutil

from common import LUMEN_EX, REFERENCES, median_of, reference_workspace, timed

SYNTAX_ERROR = "import torch\n\ndef scaled_dot_product_attention(q, k, v, mask=None)\n    return q, q\n"
HANGS = (REFERENCES["attention"]).read_text().replace(
    '    d_k = q.size(-1)', '    while True:\n        pass\n    d_k = q.size(-1)', 1)
CRASHES = (REFERENCES["attention"]).read_text().replace(
    '    d_k = q.size(-1)', '    __import__("os")._exit(1)\n    d_k = q.size(-1)', 1)


def main() -> None:
    from lumen_ex.core import catalog

    parser = argparse.ArgumentParser()
    parser.add_argument("--sandbox", default="auto")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    assert HANGS != (REFERENCES["attention"]).read_text() != CRASHES, "the reference changed: adapt HANGS and CRASHES"
    ex = catalog.load().find(1)
    workspaces = {}
    for name, source in (("passing", None), ("syntax error", SYNTAX_ERROR), ("hanging function", HANGS),
                         ("crashing function", CRASHES)):
        ws = reference_workspace()
        if source is not None:
            (ws / ex.dir / ex.file).write_text(source)
        workspaces[name] = ws
    seconds = {}
    for name, ws in workspaces.items():
        cmd = [LUMEN_EX, "check", "1", "--workspace", str(ws), "--sandbox", args.sandbox, "--seed", "1"]
        seconds[name] = median_of(args.runs, lambda cmd=cmd: timed(cmd, ok_codes=(0, 1)))
        shutil.rmtree(ws.parent, ignore_errors=True)
    base = seconds["passing"]
    print(f"lumen-ex check 1 --sandbox {args.sandbox}, median of {args.runs} runs each")
    print(f"passing (reference)   {base:6.2f} s")
    print(f"syntax error          {seconds['syntax error']:6.2f} s  ratio {seconds['syntax error'] / base:5.2f} x  (target about 1 x)")
    hang = seconds["hanging function"]
    print(f"hanging function      {hang:6.2f} s  ratio {hang / base:5.2f} x; minus one call limit "
          f"({ex.times.call_seconds:g} s): {(hang - ex.times.call_seconds) / base:5.2f} x  (target about 1 x)")
    crash = seconds["crashing function"]
    print(f"crashing function     {crash:6.2f} s  ratio {crash / base:5.2f} x  (a new worker for every test that calls it)")


if __name__ == "__main__":
    main()

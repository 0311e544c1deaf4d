"""A trusted process's quick exit (src/lumen_ex/core/trusted.py ``quick_exit``): the garbage
collector's last walk is skipped, and nothing else about the exit changes."""

from __future__ import annotations

import subprocess
import sys

# atexit runs its callbacks last-registered first: "after" runs before the freeze, "before" after it.
PROGRAM = """
import atexit, gc, sys
atexit.register(lambda: print("before:", gc.get_freeze_count() > 0))
from lumen_ex.core.trusted import quick_exit
quick_exit()
atexit.register(lambda: print("after:", gc.get_freeze_count() == 0))
print("the program's last line")
sys.exit(5)
"""


def test_every_atexit_callback_runs_the_output_is_flushed_and_the_exit_code_stays():
    proc = subprocess.run([sys.executable, "-I", "-c", PROGRAM], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 5, proc.stderr
    assert proc.stdout.splitlines() == ["the program's last line", "after: True", "before: True"], proc.stdout
    assert proc.stderr == ""

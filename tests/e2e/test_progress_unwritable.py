"""A workspace whose progress cannot be saved still gets its result, with one warning line.

Only grading itself failing is exit code 3: a progress file that cannot be written (a read-only
workspace, a full disk, a ``.lumen-ex`` that is not a folder) is the machine's problem, not the
grade's. As root no permission bit stops a write, so the test puts a file where the folder goes.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, best_sandbox, workspace_with


def test_an_unwritable_progress_file_warns_once_and_keeps_the_verdict(tmp_path):
    root = workspace_with(tmp_path, 1, None)
    state = root / ".lumen-ex"
    if state.is_dir():
        shutil.rmtree(state)
    state.write_text("not a folder")
    lumen = Path(sys.executable).parent / "lumen-ex"
    done = subprocess.run([str(lumen), "check", "1", "--workspace", str(root), "--sandbox", best_sandbox(),
                           "--seed", "3"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "COLUMNS": "100", "LUMEN_EX_CHECK_SERVER": "off"})
    assert done.returncode == 1, done.stdout + done.stderr     # the stub fails: exit 1, not 3
    assert "Not yet" in done.stdout
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "progress was not saved" in warnings[0], done.stderr
    assert "Traceback" not in done.stderr

"""The file that was checked, and only that file (src/lumen_ex/core/snapshot.py).

A save in the middle of a check must not grade a blend of two versions. The first version below
kills its worker in the middle of the check, so the harness must start a second worker, which,
reading from disk, would import whatever the file holds by then; the test saves a correct version
as soon as the first worker is running. The result must be exactly the first version's own result,
and carry its sha256.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from pathlib import Path

import pytest
from conftest import CORPORA, best_sandbox, workspace_with
from docker_support import summary
from proc_support import running_with, wait_until

from lumen_ex.core import catalog
from lumen_ex.core.results import RunResult, Status
from lumen_ex.harness.check import run_check

EXERCISE = catalog.load().find(1)

# Wrong weights (uniform), and a causal_mask that takes its worker down: every later call needs a
# fresh worker, which imports the module again.
FIRST = '''
import ctypes, os, time
import torch
ctypes.CDLL(None).prctl(15, b"@TOKEN@", 0, 0, 0)

def scaled_dot_product_attention(q, k, v, mask=None):
    w = torch.full((*q.shape[:-1], k.shape[-2]), 1.0 / k.shape[-2], dtype=q.dtype, device=q.device)
    return w @ v, w

def causal_mask(L_q, L_k=None, device=None):
    time.sleep(0.5)
    os._exit(7)
'''

CORRECT = (CORPORA["attention"] / "correct").glob("*.py")


def _check(root: Path, select: str, launcher=None) -> RunResult:
    return run_check(1, workspace=root, sandbox=best_sandbox(), seed=7, device="cpu", record=False,
                     select=select, launcher=launcher)


@pytest.mark.slow
def test_a_save_during_the_check_is_not_graded(tmp_path, forked_bwrap):
    """A save during the check is not graded: three checks, the first two with a worker killed at
    every test, so that the save lands mid-check. Under bwrap the workers are forked from a warm
    zygote (tests/conftest.py ``forked_bwrap``), as `lumen-ex grade`, watch and the check server start
    them: each replacement is a fork, not a torch import, and holds a copy of the workspace made when
    it was forked, after the save; what it imports is still the snapshot's bytes."""
    token = "snap" + secrets.token_hex(4)
    first = FIRST.replace("@TOKEN@", token)
    correct = next(iter(sorted(CORRECT))).read_text()
    select = "causal or 4d or 3d"

    alone = _check(workspace_with(tmp_path / "alone", 1, first), select, forked_bwrap)

    root = workspace_with(tmp_path / "saved", 1, first)
    target = root / EXERCISE.dir / EXERCISE.file

    def save_when_running():
        if wait_until(lambda: running_with(token), timeout=60, step=0.02):
            target.write_text(correct)

    saver = threading.Thread(target=save_when_running, daemon=True)
    saver.start()
    result = _check(root, select, forked_bwrap)
    saver.join(timeout=60)
    assert target.read_text() == correct, "the save did not happen during the check"

    assert result.source["sha256"] == hashlib.sha256(first.encode()).hexdigest()
    assert result.source == alone.source
    assert summary(result) == summary(alone)
    assert result.status is Status.FAIL
    assert not any(t.status is Status.PASS and "4d" in t.id for t in result.tests)   # never the correct version

    again = _check(root, select, forked_bwrap)   # the next check grades the saved file
    assert again.source["sha256"] == hashlib.sha256(correct.encode()).hexdigest()
    assert again.status is Status.PASS, again.message


def test_a_file_that_cannot_be_read_fails_with_one_clear_row(tmp_path):
    import os

    root = workspace_with(tmp_path, 1, None)
    target = root / EXERCISE.dir / EXERCISE.file
    target.unlink()
    os.mkfifo(target)                      # a FIFO would hang a reader that does not check
    result = _check(root, "4d")
    assert result.status is Status.FAIL
    assert [t.id for t in result.tests] == ["file"]
    assert "FIFO" in result.message and "only regular files" in result.message
    assert result.score == 0 and result.max_score == sum(EXERCISE.points.values())

    target.unlink()
    target.write_text("x = 1\n" + "#" * (300 * 1024))
    result = _check(root, "4d")
    assert result.status is Status.FAIL and "too large" in result.message

"""`lumen-ex dev check --seeds`: lists and ranges of seeds (a wider sweep before a pack is published,
docs/authoring.md section 5), each a seed `--seed` would take, within a bound, and the mistakes said
in one line with the next step (src/lumen_ex/cli/dev.py ``_seeds``)."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import LUMEN_EX

from lumen_ex.cli.dev import MAX_SEEDS, _seeds
from lumen_ex.core.errors import UsageError
from lumen_ex.core.seeds import MAX_SEED


def test_lists_and_ranges_name_each_seed_once_in_order():
    assert _seeds("--seeds", "1,2,3") == (1, 2, 3)
    assert _seeds("--seeds", "1-3,7,2") == (1, 2, 3, 7)
    assert _seeds("--seeds", " 5 - 6 , 0") == (5, 6, 0)
    assert _seeds("--close-seeds", "") == ()
    assert _seeds("--seeds", f"{MAX_SEED - 1}-{MAX_SEED}") == (MAX_SEED - 1, MAX_SEED)
    assert len(_seeds("--seeds", f"1-{MAX_SEEDS}")) == MAX_SEEDS
    # a seed named twice counts once against the bound, too
    assert _seeds("--seeds", f"1-{MAX_SEEDS},1-{MAX_SEEDS},{MAX_SEEDS},2-3") == tuple(range(1, MAX_SEEDS + 1))
    assert _seeds("--seeds", f"1-600,500-{MAX_SEEDS}") == tuple(range(1, MAX_SEEDS + 1))


@pytest.mark.parametrize(("text", "said", "next_step"), [
    ("3-1", "runs backwards", "--seeds 1-3"),
    ("-5", "neither a seed nor a range", "--seeds 1-30"),
    ("1.5", "neither a seed nor a range", "--seeds 1-30"),
    ("\u00b2", "neither a seed nor a range", "--seeds 1-30"),      # a digit to str.isdigit, not to int()
    ("1-2-3", "neither a seed nor a range", "--seeds 1-30"),
    (str(MAX_SEED + 1), "out of range", f"0 to {MAX_SEED}"),
    (f"1-{MAX_SEEDS + 1}", f"more than {MAX_SEEDS} seeds", "sweep in parts"),
    (f"1-{MAX_SEEDS},{MAX_SEEDS + 1}", f"more than {MAX_SEEDS} seeds", "sweep in parts"),
    (f"1-600,500-{MAX_SEEDS + 1}", f"more than {MAX_SEEDS} seeds", "sweep in parts"),
])
def test_a_bad_seed_is_one_line_and_the_next_step(text, said, next_step):
    with pytest.raises(UsageError) as raised:
        _seeds("--seeds", text)
    assert said in str(raised.value) and next_step in raised.value.next_step and "\n" not in str(raised.value)


@pytest.mark.slow
def test_the_report_grades_under_the_seeds_of_a_range():
    proc = subprocess.run([LUMEN_EX, "dev", "check", "--no-grade", "--format", "json", "-e", "1", "--seeds", "4-6,1",
                           "--close-seeds", "6-8"], capture_output=True, text=True, timeout=120, cwd="/")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["seeds"] == [4, 5, 6, 1] and report["close_seeds"] == [7, 8]

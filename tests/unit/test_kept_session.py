"""A kept pytest session (src/lumen_ex/harness/kept_session.py) grades exactly as a fresh one.

One grading process grades a whole class through one kept session per exercise. These tests grade
correct, buggy and hostile files, interleaving the two exercises and putting a correct file after
each failing or hostile one, once through kept sessions and once with a fresh session per check,
and compare every test's status, score, message and diagnosis: nothing one submission did may
show in the next one's verdict.

The kept side also reuses the known wrong answers the process remembers by content
(src/lumen_ex/graders/support/remembered.py); the fresh side computes every one of them again. The
same verdicts on both sides show that what is remembered is what would have been computed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CORPORA, CORPUS, REFERENCES, requires_bwrap, workspace_with

from lumen_ex.graders.support import mistakes
from lumen_ex.harness.check import run_check
from lumen_ex.harness.kept_session import KeptSessions
from lumen_ex.sandbox import zygote as zygotes

pytestmark = [requires_bwrap, pytest.mark.skipif(not zygotes.supported(), reason="no zygote on this machine")]


def _cases() -> list[tuple[int, Path]]:
    buggy1 = sorted((CORPORA["attention"] / "buggy").glob("*.py"))[:4]
    buggy2 = sorted((CORPORA["kv_cache"] / "buggy").glob("*.py"))[:4]
    hostile = [CORPUS / "hostile" / f"{n}.py" for n in ("monkeypatch_comparisons", "sys_exit", "tamper_worker_replies",
                                                         "frame_gc_search")]
    cases = []
    for b1, b2, h in zip(buggy1, buggy2, hostile):
        cases += [(1, b1), (2, REFERENCES["kv_cache"]), (2, b2), (1, REFERENCES["attention"]), (1, h),
                  (1, REFERENCES["attention"])]
    assert len(cases) == 24 and all(p.is_file() for _, p in cases)   # never a silently empty corpus
    return cases


def _verdict(result) -> list:
    return [result.status.value, result.score] + [
        (t.id, t.status.value, t.score, t.message, t.diagnosis.kind if t.diagnosis else None,
         t.diagnosis.misconception if t.diagnosis else None) for t in result.tests]


@pytest.mark.slow
def test_a_kept_session_grades_every_submission_as_a_fresh_session_does(tmp_path, forked_bwrap, monkeypatch):
    launcher = forked_bwrap          # the session's zygote (tests/conftest.py): one torch import less
    sessions = KeptSessions()
    remembered = mistakes.CANDIDATES
    remembered.clear()
    reused = remembered.reused
    try:
        for i, (number, path) in enumerate(_cases()):
            ws = workspace_with(tmp_path / f"s{i}", number, path.read_text())
            kept = run_check(number, workspace=ws, seed=7, record=False, launcher=launcher, run_tests=sessions)
            monkeypatch.setattr(remembered, "enabled", False)       # the fresh side remembers nothing
            fresh = run_check(number, workspace=ws, seed=7, record=False, launcher=launcher)
            monkeypatch.setattr(remembered, "enabled", True)
            assert _verdict(kept) == _verdict(fresh), f"{path.name} (case {i})"
        assert len(sessions.sessions) == 2       # one per exercise, kept for every case
        # A buggy file graded again (as a class's second student with the same mistake would be):
        # its wrong answers are reused, and its verdict is the one computed without them.
        number, path = next(case for case in _cases() if case[0] == 2 and "buggy" in case[1].parts)
        again = run_check(number, workspace=workspace_with(tmp_path / "again", number, path.read_text()), seed=7,
                          record=False, launcher=launcher, run_tests=sessions)
        monkeypatch.setattr(remembered, "enabled", False)
        fresh = run_check(number, workspace=workspace_with(tmp_path / "again2", number, path.read_text()), seed=7,
                          record=False, launcher=launcher)
        assert _verdict(again) == _verdict(fresh)
        assert remembered.reused > reused
    finally:
        sessions.close()


def test_another_seed_gets_a_session_of_its_own(tmp_path, forked_bwrap):
    launcher = forked_bwrap
    sessions = KeptSessions()
    try:
        ws = workspace_with(tmp_path / "s", 1, (CORPORA["attention"] / "buggy").glob("*.py").__next__().read_text())
        for seed in (3, 4, 3):
            kept = run_check(1, workspace=ws, seed=seed, record=False, launcher=launcher, run_tests=sessions)
            fresh = run_check(1, workspace=ws, seed=seed, record=False, launcher=launcher)
            assert _verdict(kept) == _verdict(fresh) and kept.seed == seed
        assert len(sessions.sessions) == 2
    finally:
        sessions.close()

"""A cold check (one that starts its workers one by one: `lumen-ex check` without its server, as a
learner's CI runs it, or the server's first check) replaces a worker that failed from a zygote of its
own under bwrap (src/lumen_ex/sandbox/select.py ``replacing``). Its first worker is fresh, as before;
each replacement is a fork instead of a torch import, so a file whose functions crash at every call
no longer pays an import per test. A check in which nothing fails starts no zygote, and nothing of
the zygote outlives the check. tests/sandbox/test_zygote.py holds forked workers' verdicts to fresh
ones'; the attack tests (tests/sandbox/test_attacks.py) grade crashing files this way."""

from __future__ import annotations

import os

import pytest
from conftest import requires_bwrap, workspace_with

from lumen_ex.core.results import Status
from lumen_ex.harness import check as check_mod
from lumen_ex.harness.check import run_check
from lumen_ex.sandbox import cgroups, select
from lumen_ex.sandbox.bwrap import BwrapLauncher
from lumen_ex.sandbox.unisolated import UnisolatedLauncher
from lumen_ex.sandbox.zygote import ZygoteLauncher

# Both functions of exercise 1, with the contract's signatures, ending the worker at every call.
CRASHER = """import os


def scaled_dot_product_attention(q, k, v, mask=None):
    os._exit(1)


def causal_mask(L_q, L_k=None, device=None):
    os._exit(1)
"""
DIED = "the worker process died (exit code 1)"


@pytest.fixture
def zygotes(monkeypatch) -> list[ZygoteLauncher | None]:
    """Every replacement launcher a check makes, kept for the test to inspect."""
    made: list[ZygoteLauncher | None] = []

    def keep(launcher):
        replacement = select.replacing(launcher)
        made.append(replacement)
        return replacement

    monkeypatch.setattr(check_mod, "replacing", keep)
    return made


def _own_cgroups() -> set[str]:
    return {str(p) for p in cgroups.worker_cgroups(os.getpid())}


@requires_bwrap
@pytest.mark.slow
def test_workers_that_die_are_replaced_by_forks_of_the_checks_own_zygote(tmp_path, zygotes):
    before = _own_cgroups()
    ws = workspace_with(tmp_path / "ws", 1, CRASHER)
    result = run_check(1, workspace=ws, sandbox="bwrap", seed=5, record=False,
                       select="test_functions_defined or test_shapes or test_returns_output_and_weights")
    died = [t for t in result.tests if t.message == DIED]
    assert len(died) >= 3, [(t.id, t.status, t.message) for t in result.tests]
    assert all(t.status is Status.ERROR and t.score == 0 for t in died)
    assert [t.status for t in result.tests if t not in died] == [Status.PASS]    # the signatures alone
    [zygote] = zygotes
    assert isinstance(zygote, ZygoteLauncher)
    # The first worker was fresh; each death was followed by one fork (the last one's replacement too,
    # started ahead and killed with the check).
    assert zygote.forked == len(died)
    assert zygote.zygote is None, "the check's zygote was not stopped"
    assert _own_cgroups() == before, "a cgroup of the check's zygote or workers was left behind"


@requires_bwrap
@pytest.mark.slow
def test_a_check_where_nothing_fails_starts_no_zygote(tmp_path, zygotes):
    ws = workspace_with(tmp_path / "ws", 1, CRASHER)
    result = run_check(1, workspace=ws, sandbox="bwrap", seed=5, record=False, select="test_functions_defined")
    assert [t.status for t in result.tests] == [Status.PASS]
    [zygote] = zygotes
    assert isinstance(zygote, ZygoteLauncher) and zygote.forked == 0 and zygote.zygote is None
    assert zygote.failures == 0      # never asked to start one


def test_only_bwraps_cold_checks_get_a_zygote():
    assert select.replacing(UnisolatedLauncher()) is None
    assert select.replacing(ZygoteLauncher(BwrapLauncher())) is None     # a zygote launcher forks already

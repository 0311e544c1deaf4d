"""Held values (src/lumen_ex/sandbox/inside/held.py): a large argument every call repeats (exercise
13's weights) is sent to each worker once and then named, through a real forked worker (bwrap's, and
a docker grading slot's). Each call still gets a copy of its own; a new worker (after a crash) is sent
the value again; a worker that does not keep it has broken the protocol, which is the submission's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from docker_support import docker_param, slot_launcher

from lumen_ex.author import Held
from lumen_ex.harness.client import WorkerFailure, WorkerPool
from lumen_ex.harness.proxy import LearnerModule
from lumen_ex.sandbox.base import WorkerSpec

PROBE = '''
import os, sys

def weigh(w, x):
    out = (w["a"] * x).sum()
    w["a"].mul_(0)                # writes into its argument: only this call's copy
    return out

def crash():
    os._exit(3)

def refuse_holds():
    held = next(m for name, m in sys.modules.items() if name.endswith(".held"))
    def refuse(key, value):
        raise ValueError("no")
    held.hold = refuse
    return "refusing"
'''
FUNCTIONS = ["weigh", "crash", "refuse_holds"]


@pytest.fixture(params=["bwrap", docker_param()])
def probe(request, forked_bwrap, tmp_path):
    launcher = forked_bwrap
    if request.param == "bwrap" and forked_bwrap is None:
        pytest.skip("bubblewrap unavailable")
    if request.param == "docker":
        launcher = slot_launcher()
    ws: Path = tmp_path / "ws"
    (ws / "probe").mkdir(parents=True)
    (ws / "probe" / "probe_mod.py").write_text(PROBE)
    spec = WorkerSpec(workspace=ws, module_dir=ws / "probe", device="cpu")
    pool = WorkerPool(launcher, spec, module="probe_mod", functions=FUNCTIONS, call_timeout=30.0)
    yield LearnerModule(pool, "cpu", "probe_mod.py"), pool
    pool.close()
    if launcher is not forked_bwrap:
        launcher.close()


def test_sent_once_per_worker_and_each_call_gets_its_own_copy(probe, monkeypatch):
    sub, pool = probe
    weights = Held({"a": torch.arange(1.0, 7.0)})
    holds = []
    real_hold = WorkerPool._hold
    monkeypatch.setattr(WorkerPool, "_hold", lambda self, w, item, limit: (holds.append(item.key),
                                                                          real_hold(self, w, item, limit)))
    x = torch.ones(6)
    for _ in range(3):         # the first call's in-place write reached no later call
        assert float(sub.call("weigh", (weights, x)).value) == 21.0
    assert holds == [weights.key]
    with pytest.raises(WorkerFailure):
        sub.call("crash")
    assert float(sub.call("weigh", (weights, x)).value) == 21.0   # a new worker: sent again
    assert holds == [weights.key, weights.key]


def test_a_worker_that_does_not_keep_it_broke_the_protocol(probe):
    sub, _ = probe
    assert sub.call("refuse_holds").value == "refusing"
    with pytest.raises(WorkerFailure) as info:
        sub.call("weigh", (Held({"a": torch.ones(2)}), torch.ones(2)))
    assert info.value.kind == "protocol"


def test_a_suite_that_holds_too_many_values_is_told_before_anything_is_sent(probe):
    """A new Held for every call would fill the worker's store (held.MAX_HELD); the harness refuses
    the one too many itself, with a ValueError that blames the suite's line (harness/plugin.py
    author_fault), instead of sending it and reading the worker's refusal as the learner's protocol
    error. The worker stays, and still answers."""
    from lumen_ex.sandbox.inside.held import MAX_HELD

    sub, pool = probe
    x = torch.ones(3)
    helds = [Held({"a": torch.full((3,), 2.0)}) for _ in range(MAX_HELD)]
    for item in helds:
        sub.weigh(item, x)
    worker = pool.worker
    with pytest.raises(ValueError, match=f"at most {MAX_HELD} Held values"):
        sub.weigh(Held({"a": torch.full((3,), 2.0)}), x)
    assert pool.worker is worker and pool.restarts == 0 and len(worker.holds) == MAX_HELD
    assert float(sub.weigh(helds[0], x)) == 6.0          # a value it keeps: still answered

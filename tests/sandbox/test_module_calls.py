"""``submission.call(..., module=ModuleCall(...))``: a learner's nn.Module class graded through the sandbox.

The worker builds the class, moves it (``.to(dtype)``, ``.to(device)``), loads the harness's
state_dict strictly, calls it, and sends back the output, the gradients of named parameters and of
inputs, and a description of ``named_parameters()`` (src/lumen_ex/sandbox/inside/module_call.py
``module_instance``; src/lumen_ex/harness/proxy.py ``ModuleCall``). Every failure of the learner's
module (a constructor that raises, a strict load that misses a name, a hook that raises, a forward
that returns no tensor, thousands of parameters with huge names) is the submission's: a
LearnerError or a value the suite judges, never an error of the grader. One forked bwrap worker
serves the whole module, as one check's worker serves its tests: under bwrap and in a docker
grading slot.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from docker_support import docker_param, slot_launcher

from lumen_ex.harness.client import LearnerError, WorkerPool
from lumen_ex.harness.module_calls import ModuleCall, checked_parameters
from lumen_ex.harness.proxy import LearnerModule
from lumen_ex.sandbox.base import WorkerSpec
from lumen_ex.sandbox.inside import wire
from lumen_ex.sandbox.inside.wire import Opaque

PROBE = textwrap.dedent('''
    import torch
    from torch import nn

    class Affine(nn.Module):
        def __init__(self, d_in, d_out, bias=False):
            super().__init__()
            if d_in < 1:
                raise ValueError("d_in must be at least 1")
            self.lin = nn.Linear(d_in, d_out, bias=bias)
            self.spare = nn.Linear(d_in, d_out, bias=False)     # never used: no gradient reaches it

        def forward(self, x, scale=1.0):
            return self.lin(x) * scale

    class Many(nn.Module):      # thousands of parameters, with huge names
        def __init__(self):
            super().__init__()
            for i in range(3000):
                self.register_parameter("p" * 5000 + str(i), nn.Parameter(torch.zeros(1)))

        def forward(self, x):
            return x * 2

    class NoTensor(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            return {"y": self.lin(x)}

    class HookRaises(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self._register_load_state_dict_pre_hook(self.hook)

        def hook(self, *args):
            raise RuntimeError("a hook of the learner's")

        def forward(self, x):
            return self.lin(x)

    class Unregistered(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.zeros(3, 3)      # a plain tensor attribute, not a parameter

        def forward(self, x):
            return x @ self.weight
''')
CLASSES = ["Affine", "Many", "NoTensor", "HookRaises", "Unregistered"]


@pytest.fixture(scope="module", params=["bwrap", docker_param()])
def sub(request, forked_bwrap, tmp_path_factory):
    """The probe module behind a forked worker: bwrap's (the session's zygote), or one forked in a
    docker grading slot, as `lumen-ex grade --sandbox docker` starts it."""
    launcher = forked_bwrap
    if request.param == "bwrap" and forked_bwrap is None:
        pytest.skip("bubblewrap unavailable")
    if request.param == "docker":
        launcher = slot_launcher()
    ws: Path = tmp_path_factory.mktemp("modules") / "ws"
    (ws / "probe").mkdir(parents=True)
    (ws / "probe" / "probe_mod.py").write_text(PROBE)
    spec = WorkerSpec(workspace=ws, module_dir=ws / "probe", device="cpu")
    pool = WorkerPool(launcher, spec, module="probe_mod", functions=CLASSES, call_timeout=30.0)
    yield LearnerModule(pool, "cpu", "probe_mod.py")
    pool.close()
    if launcher is not forked_bwrap:
        launcher.close()


def test_a_module_is_built_loaded_called_and_differentiated(sub):
    gen = torch.Generator().manual_seed(0)
    lin = torch.nn.Linear(4, 5, bias=True).double()
    state = {"lin.weight": lin.weight.detach(), "lin.bias": lin.bias.detach(),
             "spare.weight": torch.randn(5, 4, generator=gen, dtype=torch.float64)}
    x = torch.randn(2, 3, 4, generator=gen, dtype=torch.float64)
    seed = torch.randn(2, 3, 5, generator=gen, dtype=torch.float64)
    call = ModuleCall((4, 5), {"bias": True}, dtype=torch.float64, state_dict=state, describe=True,
                      param_grads=("lin.weight", "spare.weight", "missing.weight"))
    result = sub.call("Affine", (x,), {"scale": 2.0}, module=call, grad_wrt=(0,), grad_seeds=(seed,))
    xg = x.clone().requires_grad_(True)
    want = lin(xg) * 2.0
    dx, dw = torch.autograd.grad((want * seed).sum(), (xg, lin.weight))
    assert result.value.dtype == torch.float64
    torch.testing.assert_close(result.value, want.detach())
    torch.testing.assert_close(result.grads[0], dx)
    assert result.param_grads is not None
    torch.testing.assert_close(result.param_grads["lin.weight"], dw)
    assert result.param_grads["spare.weight"] is None and result.param_grads["missing.weight"] is None
    assert result.parameter_count == 3
    assert [(p.name, p.shape, p.dtype) for p in result.parameters or []] == [
        ("lin.weight", (5, 4), "float64"), ("lin.bias", (5,), "float64"), ("spare.weight", (5, 4), "float64")]


def test_what_a_learners_module_raises_is_the_learners(sub):
    x = torch.zeros(2, 3)
    with pytest.raises(LearnerError) as raised:                     # a constructor refusing its sizes
        sub.call("Affine", (x,), module=ModuleCall((0, 3)))
    assert raised.value.type == "ValueError" and "at least 1" in raised.value.message
    wrong = {"lin.weight": torch.zeros(3, 4)}                       # strict: a name missing, a shape wrong
    with pytest.raises(LearnerError) as raised:
        sub.call("Affine", (x,), module=ModuleCall((3, 3), state_dict=wrong))
    assert raised.value.type == "RuntimeError" and "Missing key" in raised.value.message
    with pytest.raises(LearnerError) as raised:                     # a load hook that raises
        sub.call("HookRaises", (x,), module=ModuleCall(state_dict={"lin.weight": torch.zeros(3, 3)}))
    assert "a hook of the learner's" in raised.value.message
    with pytest.raises(LearnerError) as raised:                     # a plain tensor attribute: nothing to load
        sub.call("Unregistered", (x,), module=ModuleCall(state_dict={"weight": torch.eye(3)}))
    assert "Unexpected key" in raised.value.message


def test_a_hostile_module_stays_within_the_bounds(sub):
    x = torch.ones(2, 3)
    result = sub.call("Many", (x,), module=ModuleCall(describe=True, param_grads=("p",)), grad_wrt=(0,),
                      grad_seeds=(torch.ones(2, 3),))
    assert result.parameter_count == 3000
    assert len(result.parameters or []) == wire.MAX_TENSORS
    assert all(len(p.name) == wire.MAX_PARAM_NAME for p in result.parameters or [])
    assert result.param_grads == {"p": None}
    torch.testing.assert_close(result.value, x * 2)
    result = sub.call("NoTensor", (x,), module=ModuleCall(param_grads=("lin.weight",)), grad_wrt=(0,),
                      grad_seeds=(torch.ones(2, 3),))
    assert isinstance(result.value, Opaque) and result.grad_error
    # the worker still answers, with the right values
    assert sub.call("Affine", (x,), module=ModuleCall((3, 2))).value.shape == (2, 2)


@pytest.mark.parametrize("listing", [
    None, {"count": 1, "list": []}, {"count": 2, "list": [["a", [1], "float32"]]},
    {"count": 1, "list": [["a" * (wire.MAX_PARAM_NAME + 1), [1], "float32"]]},
    {"count": 1, "list": [["a", [-1], "float32"]]}, {"count": 1, "list": [["a", [1] * 9, "float32"]]},
    {"count": 1, "list": [["a", [1], 7]]}, {"count": "1", "list": [["a", [1], "float32"]]},
    {"count": 99, "list": [["a", [1], "float32"]] * (wire.MAX_TENSORS + 1)},
])
def test_a_malformed_parameter_list_is_a_protocol_error(listing):
    with pytest.raises(wire.ProtocolError):
        checked_parameters(listing)


def test_a_module_call_is_bounded_on_the_harness_side():
    with pytest.raises(ValueError):
        ModuleCall(param_grads=tuple(f"p{i}" for i in range(wire.MAX_TENSORS)))
    with pytest.raises(ValueError):
        ModuleCall(dtype=torch.complex64)

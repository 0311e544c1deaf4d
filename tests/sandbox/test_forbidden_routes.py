"""A forbidden API reached where a name-based scan does not look, and the two layers that stop it.

The red team's attack: a ``typing`` forward reference (a string the standard library evaluates)
ran F.scaled_dot_product_attention and scored full marks. Its siblings are every other place the
standard library turns a string into code or an object. The two layers (docs/security.md):

1. the source scan (src/lumen_ex/harness/source_scan.py) is an allow-list: each route below is
   found, or refused as "cannot be verified", never passed; a file beside the exercise named like
   a module the worker could import is refused;
2. the worker (src/lumen_ex/sandbox/inside/forbid.py) makes every name and kernel the exercise data
   names unusable before the learner's code runs: each route, run for real in the sandbox without
   the scan, raises instead of returning the library's answer (and the same routes succeed in a
   worker told nothing, so the test can fail).

Both layers read exercise data (src/lumen_ex/core/forbidden.py): a pack that forbids softmax gets
the same two layers, scan and worker, with no code change.
"""

from __future__ import annotations

import sys

import pytest
from conftest import CORPORA, requires_bwrap, workspace_with
from docker_support import docker_param, slot_launcher

from lumen_ex.core import catalog
from lumen_ex.core.forbidden import ForbiddenAPI
from lumen_ex.core.results import Status
from lumen_ex.harness.check import run_check
from lumen_ex.harness.client import WorkerPool
from lumen_ex.harness.proxy import LearnerModule
from lumen_ex.harness.scan_rules import ALLOWED_MODULES
from lumen_ex.harness.source_scan import SourceScan, shadowing_files
from lumen_ex.sandbox.base import WorkerSpec

EX1 = catalog.load().find(1)
SDPA = "torch.nn.functional.scaled_dot_product_attention"
NAME = '"scaled_dot_" + "product_attention"'      # built at run time: no literal to find

# Each route defines f(q) returning the library's attention of q with itself, reached through it.
ROUTES = {
    "typing-forward-ref": f'''import typing
def f(q):
    ref = typing.get_args(typing.List["__import__('torch').nn.functional." + {NAME}])[0]
    return ref._evaluate({{}}, {{}}, frozenset())(q, q, q)
''',
    "typing-forward-ref-string": '''import typing
def f(q):
    ref = typing.get_args(typing.List["__import__('torch').nn.functional.scaled_dot_product_attention"])[0]
    return ref._evaluate({}, {}, frozenset())(q, q, q)
''',
    "get-type-hints": '''import typing
def g(x: "__import__('torch').nn.functional.scaled_dot_product_attention"):
    return x
def f(q):
    return typing.get_type_hints(g)["x"](q, q, q)
''',
    "eval-type": '''import typing
def f(q):
    return typing._eval_type(typing.ForwardRef("__import__('torch').nn.functional.scaled_dot_product_attention"), {}, {})(q, q, q)
''',
    "from-typing-private": '''from typing import _eval_type, ForwardRef
def f(q):
    return _eval_type(ForwardRef("__import__('torch').nn.functional.scaled_dot_product_attention"), {}, {})(q, q, q)
''',
    "attrgetter": f'''import operator
import torch
def f(q):
    return operator.attrgetter("nn.functional." + {NAME})(torch)(q, q, q)
''',
    "methodcaller": f'''import operator
import torch
def f(q):
    return operator.methodcaller({NAME}, q, q, q)(torch.nn.functional)
''',
    "functools-over-attrgetter": f'''import functools, operator
import torch
def f(q):
    get = functools.partial(operator.attrgetter, "nn.functional." + {NAME})
    return get()(torch)(q, q, q)
''',
    "functools-reduce-getattr": f'''import functools
import torch
def f(q):
    return functools.reduce(getattr, ["nn", "functional", {NAME}], torch)(q, q, q)
''',
    "singledispatch-annotation": '''import functools
@functools.singledispatch
def pick(x):
    return x
def f(q):
    return q
''',
    "pickle": '''import pickle
def f(q):
    return pickle.loads(b"ctorch.nn.functional\\nscaled_dot_product_attention\\n.")(q, q, q)
''',
    "copyreg": '''import copyreg
def f(q):
    return copyreg.__newobj__
''',
    "codecs": '''import codecs
import torch
def f(q):
    name = codecs.decode("fpnyrq_qbg_cebqhpg_nggragvba", "rot13")
    return getattr(torch.nn.functional, name)(q, q, q)
''',
    "string-formatter": '''import string
import torch
def f(q):
    return string.Formatter().get_field("0.nn.functional.scaled_dot_product_attention", [torch], {})[0](q, q, q)
''',
    "dataclass-field-default": f'''import dataclasses, operator
import torch
@dataclasses.dataclass
class Holder:
    fn: object = dataclasses.field(default_factory=lambda: operator.attrgetter("nn.functional." + {NAME})(torch))
def f(q):
    return Holder().fn(q, q, q)
''',
    "class-body": f'''import torch
class Holder:
    fn = staticmethod(vars(torch.nn.functional)[{NAME}])
def f(q):
    return Holder.fn(q, q, q)
''',
    "metaclass": f'''import torch
class Meta(type):
    def __new__(mcls, name, bases, ns):
        ns["fn"] = staticmethod(torch.nn.functional.__dict__[{NAME}])
        return super().__new__(mcls, name, bases, ns)
class Holder(metaclass=Meta):
    pass
def f(q):
    return Holder.fn(q, q, q)
''',
    "decorator": f'''import operator
import torch
@lambda fn: operator.attrgetter("nn.functional." + {NAME})(torch)
def f(q):
    return q
''',
    "default-argument": f'''import operator
import torch
def f(q, fn=operator.attrgetter("nn.functional." + {NAME})(torch)):
    return fn(q, q, q)
''',
    "module-getattr": f'''import torch
def __getattr__(name):
    if name == "f":
        return lambda q: torch.nn.functional.__dict__[{NAME}](q, q, q)
    raise AttributeError(name)
''',
    "module-getattr-assigned": '''import torch
def _hook(name):
    raise AttributeError(name)
__getattr__ = _hook
def f(q):
    return q
''',
    "import-module-as-value": '''import importlib, functools
def f(q):
    load = functools.partial(importlib.import_module, "torch.nn." + "functional")
    return load().scaled_dot_product_attention(q, q, q)
''',
    "private-attribute-of-a-value": '''import torch
def f(q):
    return torch.nn.functional.softmax._wrapped(q)
''',
    "own-private-attribute": '''import torch
class State:
    def __init__(self):
        self._kernel = torch.matmul
def f(q):
    return State()._kernel(q, q)
''',
}
# The routes the worker runs for real, without the scan: each reaches SDPA in plain Python.
RUNNABLE = {
    "eval": f"def r_eval(q):\n    return eval('__import__(\"torch\").nn.functional.' + {NAME})(q, q, q)\n",
    "typing": "import typing\ndef r_typing(q):\n    ref = typing.get_args(typing.List[\"__import__('torch').nn.functional.scaled_dot_product_attention\"])[0]\n"
              "    return ref._evaluate({}, {}, frozenset())(q, q, q)\n",
    "hints": "import typing\ndef _g(x: \"__import__('torch').nn.functional.scaled_dot_product_attention\"):\n    return x\n"
             "def r_hints(q):\n    return typing.get_type_hints(_g)['x'](q, q, q)\n",
    "attrgetter": f"import operator, torch\ndef r_attrgetter(q):\n    return operator.attrgetter('nn.functional.' + {NAME})(torch)(q, q, q)\n",
    "pickle": "import pickle\ndef r_pickle(q):\n    return pickle.loads(b'ctorch.nn.functional\\nscaled_dot_product_attention\\n.')(q, q, q)\n",
    "c-alias": "import torch\ndef r_c_alias(q):\n    return torch._C._nn.scaled_dot_product_attention(q, q, q)\n",
    "aten": "import torch\ndef r_aten(q):\n    return torch.ops.aten.scaled_dot_product_attention(q, q, q)\n",
    "aten-cpu-kernel": "import torch\ndef r_aten_cpu_kernel(q):\n    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, q, q)[0]\n",
    "aten-math": "import torch\ndef r_aten_math(q):\n    return torch.ops.aten._scaled_dot_product_attention_math(q, q, q)[0]\n",
    "gc-original": "import gc, torch\ndef r_gc_original(q):\n    for obj in gc.get_objects():\n"
                   "        if callable(obj) and getattr(obj, '__name__', '') == 'scaled_dot_product_attention':\n"
                   "            try:\n                return obj(q, q, q)\n            except Exception:\n                pass\n"
                   "    return torch._C._nn.scaled_dot_product_attention(q, q, q)\n",
    "mha": "import torch\ndef r_mha(q):\n    m = torch.nn.MultiheadAttention(8, 2, batch_first=True)\n    return m(q[0], q[0], q[0])[0]\n",
    "encoder-layer": "import torch\ndef r_encoder_layer(q):\n    return torch.nn.TransformerEncoderLayer(8, 2, batch_first=True)(q[0])\n",
}
BACKENDS = [docker_param("docker"), pytest.param("bwrap", marks=requires_bwrap, id="bwrap")]


def findings(source: str, forbidden=EX1.forbidden, fn: str = "f") -> tuple[list[str], list[str]]:
    scan = SourceScan(source, forbidden)
    return scan.reached_from(fn), [f.why for f in scan.unverifiable(fn)]


def test_a_dtype_kept_in_a_name_is_a_value_not_a_module():
    """``F64 = torch.float64`` then ``x.to(F64)`` was refused as "passes the module torch around"
    (an alias of any dotted path under torch counted as torch itself): correct code written that way
    could not pass. A name for a module itself is still refused when it is passed around."""
    for source in ("import torch\nF64 = torch.float64\ndef f(q):\n    return q.to(F64)\n",
                   "import torch\ndef f(q):\n    f32, dev = torch.float32, q.device\n    acc = torch.float32\n"
                   "    return q.to(acc).to(dev)\n"):
        assert findings(source) == ([], []), source
    for source in ("import torch\ndef h(m):\n    return m\ndef f(q):\n    t = torch\n    return h(t)\n",
                   "import torch\ndef h(m):\n    return m\nfn = torch.nn.functional\ndef f(q):\n    return h(fn)\n"):
        assert any("passes the module" in why for why in findings(source)[1]), source


THREADS_AND_PROCESSES = {
    "thread-pool": "import torch.multiprocessing as mp\ndef f(q):\n    return mp.pool.ThreadPool(1).apply(lambda: q)\n",
    "dummy-pool": "import torch.multiprocessing as mp\ndef f(q):\n    return mp.dummy.Pool(1).apply(lambda: q)\n",
    "process": "import torch\ndef f(q):\n    torch.multiprocessing.Process(target=print).start()\n    return q\n",
    "from-torch": "from torch import multiprocessing\ndef f(q):\n    return multiprocessing.get_context('spawn')\n",
    "rpc": "import torch.distributed.rpc as rpc\ndef f(q):\n    return rpc.rpc_sync('w', print)\n",
}


@pytest.mark.parametrize("name", sorted(THREADS_AND_PROCESSES))
def test_the_scan_refuses_code_run_in_a_thread_or_process_of_its_own(name):
    """torch.multiprocessing and torch.distributed run code where the worker's own guards may not
    hold (a new thread starts with grad mode on; a spawned process has no forbidden-API layer):
    "cannot be verified", a fail, under any exercise's data."""
    reached, unverifiable = findings(THREADS_AND_PROCESSES[name], ())
    assert unverifiable and "runs or loads code the grader cannot read" in unverifiable[0], (reached, unverifiable)


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_the_scan_never_passes_a_string_to_code_route(name):
    found, unverifiable = findings(ROUTES[name])
    assert found or unverifiable, f"{name}: the scan passed it"


def test_the_scan_still_passes_honest_code_with_the_allowed_modules():
    honest = '''from __future__ import annotations
import functools, itertools, math, operator, typing
from dataclasses import dataclass, field
from typing import Optional
import torch
import torch.nn.functional as F
@dataclass
class Shapes:
    sizes: list = field(default_factory=list)
@functools.lru_cache(maxsize=None)
def scale(d: int) -> float:
    return 1.0 / math.sqrt(d)
def f(q: torch.Tensor, mask: Optional[torch.Tensor] = None) -> "torch.Tensor":
    w = F.softmax(operator.matmul(q, q.transpose(-2, -1)) * scale(q.size(-1)), dim=-1)
    return functools.reduce(operator.add, itertools.repeat(w @ q, 1))
'''
    assert findings(honest) == ([], [])


@pytest.mark.parametrize("name", sorted(ALLOWED_MODULES - {"__future__"}) + ["test_helpers_ok", "scratch"])
def test_a_file_named_like_a_module_the_worker_could_import_is_refused(tmp_path, name):
    (tmp_path / "attention.py").write_text("x = 1\n")
    (tmp_path / f"{name}.py").write_text("x = 1\n")
    refused = shadowing_files(tmp_path, "attention.py")
    if name in ALLOWED_MODULES:
        assert refused and f"{name}.py" in refused[0], refused
    else:
        assert refused == []          # a learner's own scratch file shadows nothing


def test_packages_extensions_and_folders_that_shadow_are_refused(tmp_path):
    (tmp_path / "attention.py").write_text("x = 1\n")
    (tmp_path / "einops").mkdir()                                 # a namespace package of an allowed name
    (tmp_path / "operator").mkdir()
    (tmp_path / "operator" / "__init__.py").write_text("")       # a package shadowing the stdlib
    (tmp_path / "numpy.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\0")
    (tmp_path / "json.py").write_text("")                         # the standard library
    (tmp_path / "notes").mkdir()                                  # a plain folder of the learner's
    (tmp_path / "venv").mkdir()                                   # a namespace folder shadows only a missing module
    refused = "\n".join(shadowing_files(tmp_path, "attention.py"))
    for name in ("einops/", "operator/", "numpy.cpython-311-x86_64-linux-gnu.so", "json.py"):
        assert name in refused, refused
    assert "notes" not in refused and "venv" not in refused


def test_a_pack_that_forbids_softmax_gets_the_scan_with_no_code_change(tmp_path):
    from lumen_ex.authoring.scaffold import new_pack

    folder = new_pack(tmp_path / "course", slug="softmax", title="Softmax", name="course")
    ex = catalog.load_pack(folder.parent).find("softmax")
    assert [api.name for api in ex.forbidden] == ["torch.nn.functional.softmax"]
    for source in ("import torch\ndef f(x):\n    return torch.softmax(x, -1)\n",
                   "def f(x):\n    return x.softmax(-1)\n",
                   "import torch\ndef f(x):\n    return torch.nn.Softmax(-1)(x)\n",
                   "import torch\ndef f(x):\n    return torch.ops.aten._softmax(x, -1, False)\n"):
        assert findings(source, ex.forbidden)[0] == ["torch.nn.functional.softmax"], source
    assert findings(ROUTES["typing-forward-ref"], ex.forbidden)[1]          # a string route: unverifiable
    assert findings("import torch\ndef f(x):\n    e = (x - x.amax(-1, keepdim=True)).exp()\n"
                    "    return e / e.sum(-1, keepdim=True)\n", ex.forbidden) == ([], [])


# -- the worker's layer, run for real in the sandbox ----------------------------------------------


def _worker(tmp_path, source: str, names: list[str], forbidden, launcher, autograd: bool = True) -> LearnerModule:
    folder = tmp_path / "ws" / "routes"
    folder.mkdir(parents=True)
    (folder / "routes.py").write_text(source)
    spec = WorkerSpec(workspace=tmp_path / "ws", module_dir=folder, device="cpu", limits=EX1.limits)
    pool = WorkerPool(launcher, spec, module="routes", functions=names, forbidden=forbidden, autograd=autograd,
                      source=source.encode(), call_timeout=60)
    return pool


def _reply(pool, fn: str, q):
    """The worker's whole reply to ``fn(q)``."""
    from lumen_ex.sandbox.inside import wire

    tensors: list = []
    header = {"op": "call", "fn": fn, "device": "cpu", "args": wire.pack((q,), tensors)[0], "kwargs": {}}
    pool.ready()
    return pool.call(header, tensors, 60)


def _call(pool, fn: str, q):
    return _reply(pool, fn, q).header


def _answer(pool, fn: str, q):
    """What ``fn(q)`` returned in the worker (it must not raise)."""
    from lumen_ex.sandbox.inside import wire

    reply = _reply(pool, fn, q)
    assert reply.header.get("ok") is True, (fn, reply.header)
    return wire.unpack(reply.header["result"], reply.tensors)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["bwrap", "forked"])
def test_the_worker_refuses_every_route_the_scan_would_miss(tmp_path, kind, request):
    """Each route runs in the real sandbox, as root on the host, with no scan: with exercise 1's
    data every one raises, naming the API; a worker told nothing returns the library's answer for
    the same route (the control). Over 30 s: two workers and 28 calls."""
    import torch

    from lumen_ex.sandbox import zygote as zygotes
    from lumen_ex.sandbox.bwrap import BwrapLauncher

    if not BwrapLauncher.availability().ok or (kind == "forked" and not zygotes.supported()):
        pytest.skip("no bwrap (or zygote) here")
    launcher = BwrapLauncher() if kind == "bwrap" else zygotes.ZygoteLauncher(BwrapLauncher())
    source = "\n".join(RUNNABLE.values())
    names = [f"r_{n.replace('-', '_')}" for n in RUNNABLE]
    q = torch.randn(1, 2, 4, 8)
    try:
        control = _worker(tmp_path / "control", source, names, [], launcher)
        guarded = _worker(tmp_path / "guarded", source, names, EX1.forbidden, launcher)
        for name in names:
            plain = _call(control, name, q)
            assert plain.get("ok") is True, (name, plain)     # the route reaches the library's attention
            refused = _call(guarded, name, q)
            assert refused.get("ok") is False, (name, refused)
            error = refused["error"]
            assert error["type"] in ("ForbiddenAPIError", "TypeError", "AttributeError") and (
                "not allowed in this exercise" in error["message"]), (name, error)
            assert refused.get("forbidden"), (name, refused)
        control.close()
        guarded.close()
    finally:
        if kind == "forked":
            launcher.close()


@pytest.mark.slow
def test_a_pack_that_forbids_softmax_gets_the_worker_layer_with_no_code_change(tmp_path):
    """The scaffold's data (exercise.toml's table) makes softmax unusable in a real bwrap worker,
    however reached; exp and sum still work."""
    import torch

    from lumen_ex.authoring.scaffold import new_pack
    from lumen_ex.sandbox.bwrap import BwrapLauncher

    if not BwrapLauncher.availability().ok:
        pytest.skip(BwrapLauncher.availability().reason)
    folder = new_pack(tmp_path / "course", slug="softmax", title="Softmax", name="course")
    ex = catalog.load_pack(folder.parent).find("softmax")
    source = ("import torch, typing\n"
              "def by_hand(x):\n    e = (x - x.amax(-1, keepdim=True)).exp()\n    return e / e.sum(-1, keepdim=True)\n"
              "def by_eval(x):\n    return eval('x.soft' + 'max(-1)')\n"
              "def by_aten(x):\n    return torch.ops.aten._softmax(x, -1, False)\n"
              "def by_module(x):\n    return torch.nn.Softmax(-1)(x)\n"
              "def by_log(x):\n    return torch.log_softmax(x, -1).exp()\n"
              "def by_typing(x):\n    ref = typing.get_args(typing.List['__import__(\"torch\").softmax'])[0]\n"
              "    return ref._evaluate({}, {}, frozenset())(x, -1)\n")
    names = ["by_hand", "by_eval", "by_aten", "by_module", "by_log", "by_typing"]
    pool = _worker(tmp_path, source, names, ex.forbidden, BwrapLauncher())
    try:
        x = torch.randn(3, 5)
        assert _call(pool, "by_hand", x).get("ok") is True
        for name in names[1:]:
            reply = _call(pool, name, x)
            assert reply.get("ok") is False and "not allowed in this exercise" in reply["error"]["message"], (name, reply)
            assert reply.get("forbidden") == ["torch.nn.functional.softmax"], (name, reply)
    finally:
        pool.close()


def _launcher(kind: str):
    """A real launcher of ``kind``: bwrap's fresh workers, workers forked from a bwrap zygote, the
    unisolated mode's, or workers forked in a docker grading slot (skips where that backend is missing).
    The caller closes it (Launcher.close: the zygote or the slot it keeps)."""
    from lumen_ex.sandbox import zygote as zygotes
    from lumen_ex.sandbox.bwrap import BwrapLauncher
    from lumen_ex.sandbox.unisolated import UnisolatedLauncher

    if kind in ("bwrap", "forked") and not BwrapLauncher.availability().ok or (
            kind in ("forked", "docker-slot") and not zygotes.supported()):
        pytest.skip("no bwrap (or zygote) here")
    return {"bwrap": BwrapLauncher, "forked": lambda: zygotes.ZygoteLauncher(BwrapLauncher()),
            "none": UnisolatedLauncher, "docker-slot": slot_launcher}[kind]()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["bwrap", docker_param("docker-slot")])
def test_forbidding_autograd_refuses_it_and_leaves_the_rest_working(tmp_path, kind):
    """torch.autograd.grad and torch.Tensor.backward forbidden (as an exercise that asks for a
    backward pass by hand would): their short names are TorchScript built-ins that torch.ops lists
    with no dispatcher operator behind them (aten::grad, aten::backward), which once made the worker
    fail to load and every call fail. Now the worker loads, refuses both, and hand-written gradients
    still work, in a real bwrap worker and in one forked in a docker grading slot (the worker the
    grader image carries)."""
    import torch

    launcher = _launcher(kind)
    forbidden = (ForbiddenAPI("torch.autograd.grad", aliases=("torch.autograd.backward",)),
                 ForbiddenAPI("torch.Tensor.backward"))
    assert "aten::grad" in forbidden[0].operators() and "aten::backward" in forbidden[1].operators()
    source = ("import torch\n"
              "def by_hand(x):\n    return 2 * x\n"
              "def by_grad(x):\n    x = x.clone().requires_grad_()\n"
              "    return torch.autograd.grad((x * x).sum(), x)[0]\n"
              "def by_backward(x):\n    x = x.clone().requires_grad_()\n    (x * x).sum().backward()\n    return x.grad\n")
    try:
        pool = _worker(tmp_path, source, ["by_hand", "by_grad", "by_backward"], forbidden, launcher)
        try:
            x = torch.randn(3, 5)
            assert _call(pool, "by_hand", x).get("ok") is True
            for name, api in (("by_grad", "torch.autograd.grad"), ("by_backward", "torch.Tensor.backward")):
                reply = _call(pool, name, x)
                assert reply.get("ok") is False and "not allowed in this exercise" in reply["error"]["message"], (name, reply)
                assert reply.get("forbidden") == [api], (name, reply)
        finally:
            pool.close()
    finally:
        launcher.close()     # (a zygote or a slot; nothing for the others)


# Each route returns the gradient of sum(x * x) = 2x without writing it: through the graph autograd
# records, or by turning autograd back on first. With autograd on (the control) each one answers.
AUTOGRAD_ROUTES = {
    "walk_grad_fn": "def walk_grad_fn(x):\n    x = x.clone().requires_grad_()\n    y = (x * x).sum()\n"
                    "    g = y.grad_fn(torch.ones(()))\n    return sum(y.grad_fn.next_functions[0][0](g))\n",
    "requires_grad_kwarg": "def requires_grad_kwarg(x):\n    w = torch.zeros_like(x, requires_grad=True)\n"
                           "    ((w + x) * (w + x)).sum().backward()\n    return w.grad\n",
    "enable_grad": "def enable_grad(x):\n    with torch.enable_grad():\n        x = x.clone().requires_grad_()\n"
                   "        (x * x).sum().backward()\n    return x.grad\n",
    "enable_grad_decorator": "@torch.enable_grad()\ndef _inner(x):\n    x = x.clone().requires_grad_()\n"
                             "    (x * x).sum().backward()\n    return x.grad\n"
                             "def enable_grad_decorator(x):\n    return _inner(x)\n",
    "set_grad_enabled": "def set_grad_enabled(x):\n    torch.set_grad_enabled(True)\n"
                        "    x = x.clone().requires_grad_()\n    (x * x).sum().backward()\n    return x.grad\n",
    "leave_inference_mode": "def leave_inference_mode(x):\n    with torch.inference_mode(False):\n"
                            "        x = x.clone().requires_grad_()\n        (x * x).sum().backward()\n    return x.grad\n",
    "c_switch": "def c_switch(x):\n    torch._C._set_grad_enabled(True)\n"
                "    x = x.clone().requires_grad_()\n    (x * x).sum().backward()\n    return x.grad\n",
    "func_grad": "def func_grad(x):\n    return torch.func.grad(lambda t: (t * t).sum())(x)\n",
    "func_vjp": "def func_vjp(x):\n    return torch.func.vjp(lambda t: t * t, x)[1](torch.ones_like(x))[0]\n",
    "func_jvp": "def func_jvp(x):\n    return torch.func.jvp(lambda t: t * t, (x,), (torch.ones_like(x),))[1]\n",
    "dual_numbers": "def dual_numbers(x):\n    import torch.autograd.forward_ad as fwd\n    with fwd.dual_level():\n"
                    "        tangent = fwd.unpack_dual(fwd.make_dual(x, torch.ones_like(x)) ** 2).tangent\n"
                    "    return tangent.clone()\n",
    "custom_function": "class _Square(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, t):\n"
                       "        ctx.save_for_backward(t)\n        return t * t\n    @staticmethod\n"
                       "    def backward(ctx, g):\n        return 2 * ctx.saved_tensors[0] * g\n"
                       "def custom_function(x):\n    x = x.clone().requires_grad_()\n"
                       "    _Square.apply(x).sum().backward()\n    return x.grad\n",
    "in_a_thread": "def in_a_thread(x):\n    import threading\n    out = []\n    def run():\n"
                   "        t = x.clone().requires_grad_()\n        y = (t * t).sum()\n"
                   "        g = y.grad_fn(torch.ones(()))\n        out.append(sum(y.grad_fn.next_functions[0][0](g)))\n"
                   "    thread = threading.Thread(target=run)\n    thread.start()\n    thread.join()\n    return out[0]\n",
}
SWITCHES = {"enable_grad", "enable_grad_decorator", "set_grad_enabled", "leave_inference_mode", "c_switch",
            "func_grad", "func_vjp", "func_jvp"}
HONEST = ("def by_hand(x):\n    return 2 * x\n"
          "def under_no_grad(x):\n    with torch.no_grad():\n        return 2 * x\n"
          "def under_inference_mode(x):\n    with torch.inference_mode():\n        return (2 * x).clone()\n")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["bwrap", "forked", "none", docker_param("docker-slot")])
def test_with_autograd_off_no_route_computes_a_gradient(tmp_path, kind):
    """exercise.toml ``autograd = false`` (an exercise whose learner writes a gradient by hand): in
    a real worker of every backend (bwrap's, fresh and forked from a zygote, the unisolated mode's,
    and one forked in a docker grading slot) every route to autograd's answer fails: walking the
    recorded graph finds none (in a new thread too, where grad mode starts on), ``requires_grad=True``,
    dual numbers and a custom autograd.Function record none, and each way of turning autograd back
    on (torch.func's transforms included) is refused, named torch.enable_grad. The same routes
    answer 2x in a worker with autograd on (the control); no_grad and inference_mode still work."""
    import torch

    launcher = _launcher(kind)
    source = "import torch\n" + HONEST + "".join(AUTOGRAD_ROUTES.values())
    names = ["by_hand", "under_no_grad", "under_inference_mode", *AUTOGRAD_ROUTES]
    x = torch.randn(3, 4, dtype=torch.float64)
    try:
        control = _worker(tmp_path / "control", source, names, [], launcher)
        off = _worker(tmp_path / "off", source, names, [], launcher, autograd=False)
        for name in AUTOGRAD_ROUTES:
            plain = _answer(control, name, x)
            assert torch.equal(plain, 2 * x), (name, plain)      # the route reaches autograd's answer
            refused = _call(off, name, x)
            assert refused.get("ok") is False, (name, refused)
            if name in SWITCHES:
                assert refused.get("forbidden") == ["torch.enable_grad"], (name, refused)
                assert "not allowed in this exercise (autograd is off" in refused["error"]["message"], (name, refused)
        for name in ("by_hand", "under_no_grad", "under_inference_mode"):
            assert _call(off, name, x).get("ok") is True, name
        control.close()
        off.close()
    finally:
        launcher.close()     # (a zygote or a slot; nothing for the others)


# -- end to end: the red team's attack and its siblings, graded ----------------------------------

BY_HAND = (CORPORA["attention"] / "correct" / "einsum_arange.py").read_text()
FORWARD_REF_ATTACK = BY_HAND + '''

import sys
import typing


def _fused(q, k, v, mask):
    ref = typing.get_args(typing.List["__import__('torch').nn.functional.scaled_dot_product_attention"])[0]
    return ref._evaluate({}, {}, frozenset())(q, k, v, attn_mask=mask)


_by_hand = scaled_dot_product_attention


def scaled_dot_product_attention(q, k, v, mask=None):
    out, weights = _by_hand(q, k, v, mask)
    return _fused(q, k, v, mask), weights
'''
SHADOW = BY_HAND + "\ntry:\n    import einops\nexcept ImportError:\n    einops = None\n"


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_forward_reference_attack_fails_under_every_backend(tmp_path, backend):
    """The red team's file, graded for real: no full marks, refused by the scan, and the worker's
    own layer named the API when the string route ran. Over 30 s under docker: a container."""
    root = workspace_with(tmp_path, 1, FORWARD_REF_ATTACK)
    result = run_check(1, workspace=root, sandbox=backend, seed=1234, device="cpu", record=False)
    assert result.status is Status.FAIL and result.score < result.max_score, result.message
    attention = [t for t in result.tests if t.status is Status.FAIL and "scaled_dot_product_attention" in t.message
                 or (t.diagnosis is not None and t.diagnosis.kind == "forbidden")]
    assert attention, [(t.id, t.message) for t in result.tests]
    assert any("implement it yourself" in t.message and "F.scaled_dot_product_attention" in t.message
               for t in result.tests), [(t.id, t.message) for t in result.tests]
    assert not [t for t in result.tests if t.status in (Status.ERROR,)], [(t.id, t.message) for t in result.tests]


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_module_beside_the_exercise_cannot_stand_in_for_an_allowed_one(tmp_path, backend):
    """einops.py beside attention.py (the worker's environment has no einops, and the file tries
    ``import einops``): the check is refused, naming the file."""
    assert "einops" not in sys.modules
    root = workspace_with(tmp_path, 1, SHADOW)
    (root / EX1.dir / "einops.py").write_text("import torch.nn.functional as F\nfused = F.scaled_dot_product_attention\n")
    result = run_check(1, workspace=root, sandbox=backend, seed=1234, device="cpu", record=False)
    assert result.status is Status.FAIL and result.score < result.max_score
    messages = " ".join(t.message for t in result.tests)
    assert "einops.py beside it" in messages, messages


def test_forbidden_data_is_read_from_the_pack_and_the_exercise():
    sdpa = next(api for api in EX1.forbidden if api.name == SDPA)
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in sdpa.kernels
    assert "torch.nn.TransformerEncoderLayer" in sdpa.built_on and sdpa.hint
    assert ForbiddenAPI("torch.nn.functional.softmax").operators() == ("aten::softmax",)
    assert catalog.load().find(4).forbidden == ()          # RoPE forbids nothing: no scan, nothing disabled

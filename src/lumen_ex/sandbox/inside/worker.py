"""The untrusted side of the pipe: imports the learner's module and answers calls.

Runs in the sandbox as ``python -I -B worker.py fds REQ_FD REP_FD`` (two inherited pipe ends) or
``... worker.py stdio``, or is forked from the zygote (zygote.py). Only this folder is visible to it:
no hidden test, reference or result ever enters this process. The learner's code shares the process
and can tamper with anything here, so the harness treats every reply as a claim and checks it.

Protocol, after the worker says hello:

    {"id": 1, "op": "setup",
     "forbidden": [{"api": "torch.nn.MultiheadAttention", "names": [...], "kernels": [...]}],
     "autograd": true}
    {"id": 2, "op": "load", "module": "attention", "path": "/workspace/01-attention",
     "functions": ["scaled_dot_product_attention"]}
    {"id": 3, "op": "call", "fn": "causal_mask", "args": [...], "kwargs": {...}, "device": "cpu",
     "grad": {"wrt": [0, 1], "seeds": [...]}, "count_ops": false, "echo_args": false}
    {"id": 4, "op": "call", "fn": "GroupedQueryAttention", "args": [...], "device": "cpu",
     "module": {"init_args": [...], "init_kwargs": {...}, "dtype": "float64",
                "state": {"names": [...], "values": {"$tuple": [...]}}, "method": "__call__",
                "describe": true},
     "grad": {"wrt": [0], "seeds": [...], "params": ["q_proj.weight", ...]}}

    {"id": 5, "op": "hold", "key": "held-0", "value": {"$dict": {...}}}     (then "$held" in a call: held.py)

"setup" makes the exercise's forbidden APIs unusable (and autograd, or Triton's mode, as the
exercise says) before any learner code exists in this process, so its reply is this folder's own
word: a failure there is lumen-ex's, never the learner's (the harness reports it so). "load" then
imports the learner's module; from that reply on, every reply is a claim.

A call with "module" builds the named nn.Module class first (module_call.py) and calls one of its
methods; "grad"'s "params" asks for the gradients of named parameters as well (by name, in that order).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "lumen_inside"   # the name this folder is imported under inside the sandbox (see _wire_module)
TYPE_CHECKING = False   # typing.TYPE_CHECKING, read by the type checker, without importing typing here
if TYPE_CHECKING:
    import types
    from collections.abc import Sequence
    from typing import Any

    import torch

    from . import forbid, held, wire, work_counter
else:
    wire = forbid = work_counter = held = torch = None  # imported in prepare(), once the extra site folders are on sys.path

LEARNER_DIRS: list[str] = []
SET_UP: list[bool] = []         # one entry once "setup" has been done: "load" comes after it, never before


def _wire_module() -> types.ModuleType:
    """wire.py from this folder, imported as a submodule of the folder made a package by its path
    (``lumen_inside``), so that wire and its parts use the same relative imports here as in the
    harness (``lumen_ex.sandbox.inside``). Nothing is put on sys.path, and no folder above this one
    is read: in the grader image the worker's user may read this folder alone."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(PACKAGE, os.path.join(HERE, "__init__.py"),
                                                  submodule_search_locations=[HERE])
    assert spec is not None and spec.loader is not None   # always, for a path ending in .py
    package = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = package
    spec.loader.exec_module(package)
    return importlib.import_module(f"{PACKAGE}.wire")


def _load_meta_kernels() -> None:
    """torch loads its meta-device kernels (about half a second) on the first meta operation, which the
    hidden suites use. A worker started in advance (``+warm``) or the zygote loads them here, before
    any learner code; the variables torch sets meanwhile (TORCHINDUCTOR_CACHE_DIR) are taken out
    again, so that the learner's code sees the environment as the sandbox made it.

    It would be twice as long with ``torch._dynamo``, which those kernels' wrapper imports on its
    first call unless :func:`skip_dynamo_import` (run by prepare for every worker) has spared it. A
    worker started cold pays the rest in its first meta test instead; a worker that runs no meta test
    (the fresh one of exercise 5's memory test, src/lumen_ex/harness/proxy.py) is started without it."""
    environment = dict(os.environ)
    on_meta = torch.arange(2, device="meta")
    (on_meta[:, None] <= on_meta[None, :]).sum()
    scores = torch.empty(1, 2, 2, device="meta")
    torch.logsumexp(scores @ scores.transpose(-2, -1), dim=-1)
    for name in set(os.environ) - set(environment):
        del os.environ[name]


def main(argv: list[str]) -> int:
    if argv[1:2] == ["fds"]:
        req_fd, rep_fd, extra_sites = int(argv[2]), int(argv[3]), argv[4:]
        warm = extra_sites[:1] == ["+warm"]        # sandbox/base.py WARM_FLAG
        extra_sites = extra_sites[warm:]
    else:  # stdio: keep the real stdin/stdout for frames, send learner prints to stderr
        req_fd, rep_fd, extra_sites, warm = os.dup(0), os.dup(1), argv[2:], False
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(2, 1)
    prepare(extra_sites, warm)
    return serve(req_fd, rep_fd)


def prepare(extra_sites: list[str], warm: bool) -> None:
    """Import the wire format and torch (and, when ``warm``, its meta kernels): all a worker does
    before it knows its learner. The zygote (zygote.py) does it once and forks workers from there."""
    sys.path.extend(extra_sites)
    global wire, forbid, work_counter, held, torch
    wire = _wire_module()
    held = importlib.import_module(f"{PACKAGE}.held")       # held.py: values sent once, then named
    forbid = importlib.import_module(f"{PACKAGE}.forbid")   # forbid.py: the worker's layer against forbidden APIs
    work_counter = importlib.import_module(f"{PACKAGE}.work_counter")   # work_counter.py: a call's count_ops
    import torch

    skip_dynamo_import(torch)
    if warm:
        _load_meta_kernels()


def skip_dynamo_import(torch: Any) -> int:
    """Spare every worker the import of ``torch._dynamo`` (measured on a 2-core machine: ``import
    torch`` 2.2 s of CPU, 3.8-4.0 s with ``torch._dynamo``), which nothing a worker runs needs;
    returns how many of torch's functions were marked.

    torch wraps about 300 of its Python kernels (the meta kernels the hidden suites' meta tests
    reach, the reference decompositions) in ``torch._compile._disable_dynamo``, which imports
    ``torch._dynamo`` on a wrapped function's first call only to ask dynamo not to trace it, and
    keeps the answer on the function as ``__dynamo_disable``. Nothing is traced by dynamo in a worker
    (``torch.compile`` and ``torch._dynamo`` are refused to the learner: src/lumen_ex/harness/scan_rules.py),
    so each wrapped function is given that answer in advance: itself, called as it is. A torch whose
    wrapper is built otherwise is left as it is (0 marked), and a function wrapped later still imports
    dynamo on its first call, as before: only time changes, never what a kernel computes."""
    import gc

    try:
        wrap = torch._compile._disable_dynamo
        code = wrap(lambda: None).__code__
        slot = code.co_freevars.index("fn")
    except (AttributeError, TypeError, ValueError):
        return 0
    marked = 0
    for obj in gc.get_objects():
        if type(obj) is type(wrap) and obj.__code__ is code and obj.__closure__:
            fn = obj.__closure__[slot].cell_contents
            if getattr(fn, "__dynamo_disable", None) is None:
                try:
                    fn.__dynamo_disable = fn
                except (AttributeError, TypeError):
                    continue
                marked += 1
    return marked


def serve(req_fd: int, rep_fd: int) -> int:
    """Say hello, then answer requests until the harness closes the request pipe."""
    send(rep_fd, {"hello": True, "protocol": wire.PROTOCOL_VERSION, "pid": os.getpid(),
                  "torch": torch.__version__, "cuda": torch.cuda.is_available()})
    parser = wire.FrameParser()
    module: types.ModuleType | None = None
    reply: dict[str, object]
    out: list[torch.Tensor]
    while True:
        try:
            header, tensors = wire.read_frame_blocking(req_fd, parser)
        except EOFError:
            return 0
        rid, op = header.get("id"), header.get("op")
        started = time.perf_counter()
        try:
            if op == "setup":
                setup(header)
                reply, out = {"ok": True}, []
            elif op == "load":
                module, reply, out = load(header, tensors), {"ok": True}, []
                reply["functions"] = describe_functions(module, header.get("functions", []))
            elif op == "hold":
                held.hold(header.get("key"), wire.unpack(header.get("value"), tensors, dicts=True))
                reply, out = {"ok": True}, []
            elif op == "call" or op == "kernel_ir":
                if module is None:
                    raise RuntimeError("no module loaded")
                reply, out = call(module, header, tensors) if op == "call" else _kernels().ir_reply(module, header)
            else:
                raise RuntimeError(f"unknown op {op!r}")
        except BaseException as exc:  # noqa: BLE001  SystemExit and KeyboardInterrupt included
            reply, out = {"ok": False, "error": describe_exception(exc)}, []
            if op == "call" and forbid.called:
                reply["forbidden"] = list(dict.fromkeys(forbid.called))[:wire.MAX_TENSORS]
        reply["id"] = rid
        reply["elapsed"] = time.perf_counter() - started
        flush_learner_streams()
        try:
            with torch._C.DisableTorchFunctionSubclass():
                frame = wire.encode_frame(reply, out)
        except Exception as exc:  # noqa: BLE001  a returned object that cannot be sent
            frame = wire.encode_frame({"id": rid, "ok": False, "error": describe_exception(exc)})
        wire.write_all(rep_fd, frame)


def send(fd: int, header: dict[str, object], tensors: Sequence[torch.Tensor] = ()) -> None:
    wire.write_all(fd, wire.encode_frame(header, list(tensors)))


def setup(header: dict[str, Any]) -> None:
    """What the exercise asks of this process before the learner's module exists in it."""
    if LEARNER_DIRS:
        raise RuntimeError("setup after the learner's module was loaded")
    forbid.disable(list(header.get("forbidden", [])))
    if header.get("autograd") is False:     # exercise.toml autograd = false
        forbid.autograd_off()
    if header.get("kernel"):                # exercise.toml kernel = "triton"
        _kernels().prepare(header["kernel"])
    SET_UP.append(True)


def load(header: dict[str, Any], tensors: Sequence[torch.Tensor] = ()) -> types.ModuleType:
    if not SET_UP:      # the forbidden APIs would still be usable: no learner code without them refused
        raise RuntimeError("load before setup: the worker was not told what this exercise forbids")
    path, name = str(header["path"]), str(header["module"])
    source = None
    if header.get("source") == "tensor" and tensors:   # the harness's snapshot of the file
        source = tensors[0].numpy().tobytes()
    LEARNER_DIRS.append(os.path.realpath(path))
    # The learner's folder is never put on sys.path: no file in it can stand in for a module that
    # the learner's code, torch or the standard library imports by name.
    file = os.path.join(path, name + ".py")
    if header.get("kernel") and source is not None:     # @triton.jit reads its source through inspect
        _kernels().register_source(file, source)
    return import_exact(name, file, source)


def import_exact(name: str, file: str, source: bytes | None = None) -> types.ModuleType:
    """Import the learner's module from exactly ``source``, the bytes the harness read once when
    the check began and scanned for forbidden APIs (src/lumen_ex/core/snapshot.py, src/lumen_ex/harness/source_scan.py),
    named ``file`` in tracebacks; from ``file`` itself only when no bytes were sent. Not through the
    import system: a package folder, an extension module or a compiled .pyc of the same name would
    stand in for it unseen."""
    import types

    if source is None:
        with open(file, "rb") as f:
            source = f.read()
    module = types.ModuleType(name)
    module.__file__ = file
    sys.modules[name] = module
    try:
        exec(compile(source, file, "exec", dont_inherit=True), module.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def describe_functions(module: types.ModuleType, names: list[object]) -> dict[object, dict[str, Any] | None]:
    found: dict[object, dict[str, Any] | None] = {}
    for name in names:
        if (fn := getattr(module, str(name), None)) is None:
            found[name] = None
            continue
        entry: dict[str, Any] = {"callable": callable(fn), "params": []}
        try:
            for p in inspect.signature(fn).parameters.values():
                entry["params"].append({"name": p.name, "kind": p.kind.name,
                                        "default": None if p.default is p.empty else repr(p.default)[:80]})
        except (TypeError, ValueError):
            entry["params"] = None
        found[name] = entry
    return found


def call(module: types.ModuleType, header: dict[str, Any],
         tensors: list[torch.Tensor]) -> tuple[dict[str, object], list[torch.Tensor]]:
    fn = getattr(module, str(header.get("fn")), None)
    if fn is None:
        raise AttributeError(f"{module.__name__} has no function {header.get('fn')!r}")
    device = torch.device(str(header.get("device", "cpu")))
    spec = header.get("module")
    placed = [t.to(device) for t in tensors]

    def place(t: torch.Tensor, ref: dict[str, Any]) -> torch.Tensor:
        if ref.get("noncontiguous") and t.numel() > 1:
            # Same values, stored with the axes in reverse order (like a tensor after a transpose or
            # a head split): no two axes can be merged, so any .view() that reshapes fails, as it
            # would on real strided activations. A 1-D tensor gets a stride of 2 instead.
            if t.dim() >= 2:
                order = list(range(t.dim()))[::-1]
                t = t.permute(order).contiguous().permute(order)
            else:
                t = torch.stack([t, t], dim=-1)[..., 0]
        return t

    fresh = held.resolver(device)                         # a $held: this call's own copy, on its device
    args = list(wire.unpack(header.get("args", {"$list": []}), placed, on_tensor=place, dicts=True, held=fresh))
    kwargs = {str(k): wire.unpack(v, placed, on_tensor=place, dicts=True, held=fresh)
              for k, v in dict(header.get("kwargs", {})).items()}
    grad = header.get("grad")
    if grad:
        for i in grad["wrt"]:
            args[i] = args[i].detach().requires_grad_(True)

    counter = work_counter.WorkCounter() if header.get("count_ops") else None
    del forbid.called[:]
    instance = None
    fn = _kernels().launcher(fn, header["launch"]) if header.get("launch") else fn   # a Triton kernel, on its grid
    if spec is not None:     # an nn.Module class: built, moved and loaded as asked, then one method called
        instance = _module_call().module_instance(fn, spec, tensors, device)
        method = spec.get("method", "__call__")
        fn = (lambda *a, **k: None) if method is None else getattr(instance, str(method))   # None: built only
    if counter is not None:
        with counter:
            result = fn(*args, **kwargs)
    else:
        result = fn(*args, **kwargs)

    out: list[torch.Tensor] = []
    with torch._C.DisableTorchFunctionSubclass():
        reply: dict[str, object] = {"ok": True, "result": wire.pack(result, out, describe=describe_tensor)[0]}
    if forbid.called:   # caught by the learner's code, yet tried: in the order first called
        reply["forbidden"] = list(dict.fromkeys(forbid.called))[:wire.MAX_TENSORS]
    if counter is not None:
        reply["ops"] = counter.summary()
    if spec is not None and spec.get("describe"):
        reply["params"] = _module_call().describe_parameters(instance)
    if grad:
        named = dict(instance.named_parameters()) if instance is not None and grad.get("params") else {}
        params = [named.get(str(name)) for name in grad.get("params", [])]
        reply["grads"] = gradients(result, [args[i] for i in grad["wrt"]], grad.get("seeds", []), placed, out,
                                   params)
    if header.get("echo_args"):
        reply["args_after"] = wire.pack(tuple(args), out)[0]
    return reply, out


def _kernels() -> types.ModuleType:   # kernels.py: only for kernel exercises
    return importlib.import_module(f"{PACKAGE}.kernels")


def _module_call() -> types.ModuleType:   # module_call.py: only for calls of an nn.Module class
    return importlib.import_module(f"{PACKAGE}.module_call")


def gradients(result: object, inputs: list[torch.Tensor], seeds: list[object], placed: list[torch.Tensor],
              out: list[torch.Tensor], params: Sequence[torch.Tensor | None] = ()) -> dict[str, object]:
    """Gradients of the returned tensors with respect to ``inputs`` (and to a module's ``params``,
    None for one it does not have or that takes no gradient), for given upstream seeds."""
    items = list(result) if isinstance(result, (tuple, list)) else [result]
    loss: torch.Tensor | int = 0
    for item, seed in zip(items, seeds):
        if seed is None:
            continue
        if not isinstance(item, torch.Tensor) or not item.requires_grad:
            return {"error": "an output is not connected to the inputs (it does not require grad)"}
        # sum(out * seed) has the vector-Jacobian product as its gradient; a scalar loss also keeps
        # autograd from importing sympy to check grad_outputs shapes (0.4 s on first use).
        loss = loss + (item * wire.unpack(seed, placed).to(item.dtype)).sum()
    # (loss is still the int 0 when every seed is None: torch refuses it, and that error is the reply)
    wanted = [p for p in params if isinstance(p, torch.Tensor) and p.requires_grad]
    grads = torch.autograd.grad(loss, [*inputs, *wanted], allow_unused=True)  # type: ignore[arg-type]
    reply = {"grads": wire.pack(tuple(grads[:len(inputs)]), out)[0]}
    if params:
        by_id = {id(p): g for p, g in zip(wanted, grads[len(inputs):])}
        reply["params"] = wire.pack(tuple(by_id.get(id(p)) if p is not None else None for p in params), out)[0]
    return reply


def describe_tensor(t: torch.Tensor) -> dict[str, object]:
    cls = type(t)
    return {"pytype": f"{cls.__module__}.{cls.__qualname__}", "device": str(t.device),
            "requires_grad": bool(t.requires_grad), "grad_fn": t.grad_fn is not None,
            "contiguous": bool(t.is_contiguous())}


def describe_exception(exc: BaseException) -> dict[str, object]:
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if any(os.path.realpath(f.filename).startswith(d) for d in LEARNER_DIRS)]
    where = [{"file": os.path.basename(f.filename), "line": f.lineno, "function": f.name,
              "code": (f.line or "")[:200]} for f in frames[-5:]]
    line = getattr(exc, "lineno", None) if isinstance(exc, SyntaxError) else None
    return {"type": type(exc).__name__, "message": str(exc)[:1000], "where": where,
            "syntax_line": line}


def flush_learner_streams() -> None:
    for stream in {sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__}:
        if stream is None:   # no console (sys.__stdout__), or set so by the learner: nothing to flush
            continue
        try:
            stream.flush()
        except Exception:  # noqa: BLE001  a learner may have replaced or closed them
            pass


if __name__ == "__main__":
    sys.exit(main(sys.argv))

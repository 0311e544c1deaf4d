"""What hidden tests hold instead of the learner's module: a proxy whose calls are RPCs.

``submission.causal_mask(4, 6)`` looks like a local call, but the arguments cross the pipe as bytes,
the learner's code runs in the sandboxed worker, and what comes back is rebuilt here as brand-new
plain tensors. Each returned tensor carries ``lumen_meta`` (device, Python type, autograd state):
what the worker *claims* about it, used for feedback such as "your output is on the CPU".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from lumen_ex.results import CheckFailed, Diagnosis

from . import wire
from .client import LearnerError, WorkerPool
from .source_scan import scan_file


@dataclass(frozen=True)
class TensorMeta:
    pytype: str = "torch.Tensor"
    device: str = "cpu"
    requires_grad: bool = False
    grad_fn: bool = False
    contiguous: bool = True


@dataclass
class CallResult:
    value: Any
    grads: tuple | None = None          # gradients w.r.t. the requested arguments (None = unused)
    grad_error: str | None = None       # why no gradients could be taken
    ops: dict | None = None             # the work counter's summary
    args_after: tuple | None = None     # the arguments as they were after the call
    forbidden: list[str] = field(default_factory=list)
    output: str = ""
    elapsed: float = 0.0


def meta(t: torch.Tensor) -> TensorMeta:
    return getattr(t, "lumen_meta", None) or TensorMeta()


def _annotate(t: torch.Tensor, ref: dict) -> torch.Tensor:
    def text(key, default):
        value = ref.get(key, default)
        return str(value)[:120] if isinstance(value, str) else default

    t.lumen_meta = TensorMeta(
        pytype=text("pytype", "torch.Tensor"), device=text("device", "cpu"),
        requires_grad=ref.get("requires_grad") is True, grad_fn=ref.get("grad_fn") is True,
        contiguous=ref.get("contiguous") is not False)
    return t


class Submission:
    """The learner's module, as seen by hidden tests."""

    def __init__(self, pool: WorkerPool, device: str, module_file: str):
        self._pool = pool
        self.device = device
        self.module_file = module_file
        self.outputs: list[str] = []

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self.call(name, args, kwargs).value

    # -- what tests may ask ----------------------------------------------------------------

    def signature(self, fn: str) -> dict | None:
        """The worker's description of ``fn`` (None when the module does not define it)."""
        try:
            self._pool.ready()
        except Exception as exc:
            # A failed import fails every test the same way: show its output once, with the first.
            if getattr(exc, "output", "") and not getattr(exc, "output_shown", False):
                self.outputs.append(exc.output)
                exc.output_shown = True
            raise
        if self._pool.import_output:   # what the module printed while being imported
            self.outputs.append(self._pool.import_output)
            self._pool.import_output = ""
        return (self._pool.signatures or {}).get(fn)

    @property
    def cuda_available(self) -> bool:
        worker = self._pool.ready()
        return bool(worker.hello and worker.hello.cuda)

    def call(self, fn: str, args: tuple = (), kwargs: dict | None = None, *, device: str | None = None,
             noncontiguous: bool = False, grad_wrt: tuple[int, ...] = (), grad_seeds: tuple | None = None,
             count_ops: bool = False, echo_args: bool = False, timeout: float | None = None) -> CallResult:
        """Call ``fn(*args, **kwargs)`` in the worker and return everything it sent back, validated.

        device: where the worker puts the tensor arguments (default: the run's device).
        noncontiguous: pass every tensor argument as a strided, non-contiguous view.
        grad_wrt / grad_seeds: also return d(outputs . seeds) / d(args[i]) for each i in grad_wrt.
        count_ops: also return the work counter's summary (elements produced, largest intermediate).
        echo_args: also return the arguments as they were after the call (in-place changes).
        """
        kwargs = kwargs or {}
        self._require(fn)
        describe = (lambda t: {"noncontiguous": True}) if noncontiguous else None
        tensors: list[torch.Tensor] = []
        header: dict[str, Any] = {
            "op": "call", "fn": fn, "device": device or self.device,
            "args": wire.pack(tuple(args), tensors, describe=describe)[0],
            "kwargs": {k: wire.pack(v, tensors, describe=describe)[0] for k, v in kwargs.items()},
        }
        if grad_wrt:
            header["grad"] = {"wrt": list(grad_wrt),
                              "seeds": [wire.pack(s, tensors)[0] for s in (grad_seeds or ())]}
        if count_ops:
            header["count_ops"] = True
        if echo_args:
            header["echo_args"] = True
        try:
            reply = self._pool.call(header, tensors, timeout)
        except Exception as exc:
            self.outputs.append(getattr(exc, "output", "") or "")
            raise
        self.outputs.append(reply.output)
        return self._decode(fn, reply, n_args=len(args), n_grads=len(grad_wrt) if grad_wrt else None,
                            echo_args=echo_args, count_ops=count_ops)

    # -- internals -------------------------------------------------------------------------

    def _forbidden_in_source(self, fn: str) -> list[str]:
        """The forbidden APIs ``fn`` refers to in the learner's source (harness/source_scan.py): the
        worker's own record of forbidden calls can be erased by the code it runs, the file cannot."""
        if not hasattr(self, "_scan"):
            pool = self._pool
            forbidden = list(getattr(pool, "forbidden", None) or [])
            module_dir = getattr(getattr(pool, "spec", None), "module_dir", None)
            self._scan = (scan_file(Path(module_dir) / self.module_file, forbidden)
                          if forbidden and module_dir is not None else None)
            self._scanned: dict[str, list[str]] = {}
        if self._scan is None:
            return []
        if fn not in self._scanned:
            self._scanned[fn] = self._scan.reached_from(fn)
        return self._scanned[fn]

    def _require(self, fn: str) -> None:
        sig = self.signature(fn)
        if sig is None:
            raise CheckFailed(Diagnosis(
                "missing", f"{fn} is not defined in {self.module_file}",
                expected=f"def {fn}(...)", got="nothing by that name",
                hint=f"Keep the function name {fn} exactly as the stub has it."))
        if not sig.get("callable", True):
            raise CheckFailed(Diagnosis("missing", f"{fn} in {self.module_file} is not a function",
                                        expected="a function", got="something else"))

    def _decode(self, fn: str, reply, *, n_args: int, n_grads: int | None, echo_args: bool,
                count_ops: bool) -> CallResult:
        """Rebuild a reply, checking that its structure is what was asked for: a hostile worker must
        never make a hidden test's own arithmetic fail (that would be blamed on the grader)."""
        h, tensors = reply.header, reply.tensors
        if not h.get("ok"):
            error = h.get("error") if isinstance(h.get("error"), dict) else {}
            raise LearnerError(error, reply.output)
        try:
            value = wire.unpack(h.get("result"), tensors, on_tensor=_annotate)
            result = CallResult(value, output=reply.output, elapsed=reply.elapsed)
            grads = h.get("grads")
            if isinstance(grads, dict):
                if "error" in grads:
                    result.grad_error = str(grads["error"])[:300]
                else:
                    result.grads = wire.unpack(grads.get("grads"), tensors)
                    _require(isinstance(result.grads, tuple) and len(result.grads) == n_grads
                             and all(g is None or isinstance(g, torch.Tensor) for g in result.grads),
                             "gradients are not one tensor (or None) per requested input")
            elif n_grads is not None:
                raise wire.ProtocolError("gradients were asked for and not sent")
            if count_ops:
                ops = h.get("ops")
                _require(isinstance(ops, dict) and all(type(ops.get(k)) is int and ops[k] >= 0
                                                       for k in ("total_elements", "ops", "largest")),
                         "the work counter's summary is missing or malformed")
                result.ops = {k: v for k, v in ops.items() if isinstance(v, (int, str, list))}
            if echo_args:
                result.args_after = wire.unpack(h.get("args_after"), tensors)
                _require(isinstance(result.args_after, tuple) and len(result.args_after) == n_args,
                         "the arguments were not echoed back one for one")
        except wire.ProtocolError as exc:
            self._pool.discard()
            raise CheckFailed(Diagnosis("protocol", f"the worker sent an invalid reply: {exc}")) from None
        claimed = h.get("forbidden")
        forbidden = [str(n)[:100] for n in claimed] if isinstance(claimed, list) else []
        forbidden += [n for n in self._forbidden_in_source(fn) if n not in forbidden]
        if forbidden:
            names = [short_api_name(n) for n in forbidden]
            listed = " and ".join(names) if len(names) <= 2 else ", ".join(names[:-1]) + " and " + names[-1]
            raise CheckFailed(Diagnosis(
                "forbidden", f"implement it yourself; calling {listed} is not allowed in this exercise",
                got=names, details={"function": fn}, misconception="forbidden-api",
                hint="Write it with matrix products (@ or torch.matmul) and torch.softmax, as the README shows."))
        return result


def _require(ok: bool, what: str) -> None:
    if not ok:
        raise wire.ProtocolError(what)


def short_api_name(dotted: str) -> str:
    """How feedback names an API: F. for torch.nn.functional, nn. for torch.nn."""
    for prefix, short in (("torch.nn.functional.", "F."), ("torch.nn.", "nn.")):
        if dotted.startswith(prefix):
            return short + dotted[len(prefix):]
    return dotted

"""What hidden tests hold instead of the learner's module: a proxy whose calls are RPCs.

``submission.causal_mask(4, 6)`` looks like a local call, but the arguments cross the pipe as bytes,
the learner's code runs in the sandboxed worker, and what comes back is rebuilt here as brand-new
plain tensors. Each returned tensor carries ``lumen_meta`` (device, Python type, autograd state):
what the worker *claims* about it, used for feedback such as "your output is on the CPU".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import torch

from lumen_ex.core.forbidden import DOTTED
from lumen_ex.core.results import CheckFailed, Diagnosis
from lumen_ex.harness import wire_replies
from lumen_ex.harness.client import LearnerError, Reply, WorkerPool
from lumen_ex.harness.memory import MemoryUse
from lumen_ex.harness.module_calls import ModuleCall, ParameterInfo, checked_parameters
from lumen_ex.harness.source_scan import scan_file, shadowing_files
from lumen_ex.sandbox.inside import wire

MAX_API_NAME = 200      # characters in one forbidden API name a worker claims (a longer one: a malformed reply)


@dataclass(frozen=True)
class TensorMeta:
    pytype: str = "torch.Tensor"
    device: str = "cpu"
    requires_grad: bool = False
    grad_fn: bool = False
    contiguous: bool = True


@dataclass
class CallResult:
    """What ``submission.call`` returns: the function's value, and whatever the call's options asked for.

    Example (exercise 5's suite: ``count_ops=True`` fills ``.ops``)::

        result = submission.call("flash_attention", (q, k, v), {"causal": True}, device=device, count_ops=True)
        out, lse = expect.returns(result.value, ("output", "lse"), "flash_attention")
        largest = int((result.ops or {}).get("largest", 0))       # the largest intermediate, in elements"""

    value: Any
    grads: tuple[torch.Tensor | None, ...] | None = None   # gradients w.r.t. the requested arguments (None = unused)
    grad_error: str | None = None       # why no gradients could be taken
    ops: dict[str, Any] | None = None   # the work counter's summary (_checked_ops)
    args_after: tuple[Any, ...] | None = None   # the arguments as they were after the call
    forbidden: list[str] = field(default_factory=list)
    output: str = ""
    elapsed: float = 0.0
    memory: MemoryUse | None = None     # the harness's own measurement (measure_memory=True)
    param_grads: dict[str, torch.Tensor | None] | None = None   # ModuleCall.param_grads, by name
    parameters: list[ParameterInfo] | None = None   # ModuleCall.describe: the worker's claim
    parameter_count: int | None = None  # how many named parameters the module has (the list may be cut)


def meta(t: torch.Tensor) -> TensorMeta:
    """What the worker says of a returned tensor (device, Python type, autograd flags), without copying it.

    Example (exercise 5's suite: a meta tensor comes back without data, its device a claim)::

        if meta(out).device.split(":")[0] != device.split(":")[0]:
            raise fail("device", f"output is on {meta(out).device}; the inputs were on {device}")"""
    return getattr(t, "lumen_meta", None) or TensorMeta()


def _annotator(devices: frozenset[str]) -> Callable[[torch.Tensor, dict[str, Any]], torch.Tensor]:
    """``on_tensor`` for wire.unpack: checks a tensor reference's advisory fields (what the worker
    claims about the tensor) and stores them on the rebuilt tensor as ``lumen_meta``."""

    def annotate(t: torch.Tensor, ref: dict[str, Any]) -> torch.Tensor:
        info = tensor_meta(ref, devices)
        cast(Any, t).lumen_meta = info     # an attribute of our own on the tensor, read by meta()
        # Checked here, not claimed: a tensor rebuilt on meta arrived without data (wire.py), and
        # one that arrived with data is no meta tensor, whatever its tag says.
        if (info.device == "meta") != t.is_meta:
            raise wire.ProtocolError("a tensor's device tag says meta but it carried data, or the reverse")
        return t

    return annotate


def tensor_meta(ref: dict[str, Any], devices: frozenset[str]) -> TensorMeta:
    """The claims of one tensor reference, each of the right type (else wire.ProtocolError); the
    device must be one this call's tensors could be on (wire.check_device_tag)."""
    pytype = ref.get("pytype", "torch.Tensor")
    flags = {k: ref.get(k, default) for k, default in
             (("requires_grad", False), ("grad_fn", False), ("contiguous", True))}
    if type(pytype) is not str or not all(type(v) is bool for v in flags.values()):
        raise wire.ProtocolError("a tensor's type or autograd flags have the wrong type")
    device = wire.check_device_tag(ref.get("device", "cpu"), devices)
    return TensorMeta(pytype=wire.clean_text(pytype, 120), device=device, **flags)


class LearnerModule:
    """The learner's module, as seen by hidden tests (the ``submission`` fixture they use).

    Example (exercise 1's suite: an attribute call returns the value alone, :meth:`call` a CallResult)::

        got = submission.causal_mask(4, 7)
        got = submission.call("causal_mask", (3, 5), {"device": torch.device(device)}, device=device).value"""

    def __init__(self, pool: WorkerPool, device: str, module_file: str):
        self._pool = pool
        self.device = device
        self.module_file = module_file
        self.outputs: list[str] = []

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self.call(name, args, kwargs).value

    # -- what tests may ask ----------------------------------------------------------------

    def signature(self, fn: str) -> dict[str, Any] | None:
        """The worker's description of ``fn`` (None when the module does not define it)."""
        try:
            self._pool.ready()
        except Exception as exc:
            # A failed import fails every test the same way: show its output once, with the first.
            output = getattr(exc, "output", "")
            if output and not getattr(exc, "output_shown", False):
                self.outputs.append(output)
                cast(Any, exc).output_shown = True     # marked on the exception itself, raised for every test
            # An import that ran a forbidden API (the worker refuses it: sandbox/inside/forbid.py)
            # fails on it: when the scan proves the file reaches one, that is the diagnosis.
            self._refuse_forbidden(fn, [])
            raise
        if self._pool.import_output:   # what the module printed while being imported
            self.outputs.append(self._pool.import_output)
            self._pool.import_output = ""
        return (self._pool.signatures or {}).get(fn)

    def fresh_worker(self) -> None:
        """Replace the worker with a new one, started now (its memory baseline taken at its hello): a
        test that measures memory then sees nothing that earlier tests left in the old one.

        It is started without the warm-up of a worker kept in advance (torch's meta kernels and
        ``torch._dynamo``, src/lumen_ex/sandbox/inside/worker.py): the tests after it run on the
        CPU, so the warm-up would only delay its hello. A forking launcher forks it as usual.

        Example (exercise 5's memory test, before its measured calls)::

            submission.fresh_worker()
            use = submission.call("flash_attention", (q, k, v), device="cpu", measure_memory=True).memory"""
        pool = self._pool
        pool.discard()
        pool.spawn(pool.launcher.launch(replace(pool.spec, warm=False)))

    @property
    def graded_source(self) -> bytes | None:
        """The learner's file as this check grades it: the snapshot the harness read once
        (src/lumen_ex/core/snapshot.py), never the file on disk, which may have changed since."""
        return self._pool.source

    @property
    def cuda_available(self) -> bool:
        worker = self._pool.ready()
        return bool(worker.hello and worker.hello.cuda)

    def call(self, fn: str, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None, *,
             device: str | None = None, noncontiguous: bool = False, grad_wrt: tuple[int, ...] = (),
             grad_seeds: tuple[Any, ...] | None = None,
             count_ops: bool = False, echo_args: bool = False, timeout: float | None = None,
             measure_memory: bool = False, module: ModuleCall | None = None,
             launch: tuple[int, ...] | None = None) -> CallResult:
        """Call ``fn(*args, **kwargs)`` in the worker and return everything it sent back, validated.

        device: where the worker puts the tensor arguments (default: the run's device).
        noncontiguous: pass every tensor argument as a strided, non-contiguous view.
        grad_wrt / grad_seeds: also return d(outputs . seeds) / d(args[i]) for each i in grad_wrt.
        count_ops: also return the work counter's summary (elements produced, largest intermediate).
        echo_args: also return the arguments as they were after the call (in-place changes).
        measure_memory: also return the memory the call used, measured by the harness from outside
        the worker (src/lumen_ex/harness/memory.py), as ``CallResult.memory``.
        module: ``fn`` is an nn.Module class, built, moved and loaded as the ModuleCall says, and
        called (see ModuleCall); its ``param_grads`` join ``grad_wrt``'s gradients.
        launch: ``fn`` is a Triton kernel, launched by the worker as ``fn[launch](*args, **kwargs)``
        (src/lumen_ex/harness/kernels.py); its outputs are the tensors it wrote, from ``echo_args``.

        Example (exercises 1 and 4)::

            result = submission.call("scaled_dot_product_attention", (q, k, v), {"mask": mask}, device=device)
            result = submission.call("rope", (x, positions), device=device, grad_wrt=(0,), grad_seeds=(g,))
            result = submission.call("rope", (x, positions), device=device, echo_args=True, timeout=30)
        """
        kwargs = kwargs or {}
        self._require(fn)
        describe = (lambda t: {"noncontiguous": True}) if noncontiguous else None
        tensors: list[torch.Tensor] = []
        helds: list[wire.Held] = []       # sent to the worker once, then named (author.Held)
        header: dict[str, Any] = {
            "op": "call", "fn": fn, "device": device or self.device,
            "args": wire.pack(tuple(args), tensors, describe=describe, dicts=True, helds=helds)[0],
            "kwargs": {k: wire.pack(v, tensors, describe=describe, dicts=True, helds=helds)[0]
                       for k, v in kwargs.items()},
        }
        param_grads = module.param_grads if module is not None else ()
        if module is not None:
            header["module"] = module.header(tensors)
        if grad_wrt or param_grads:
            header["grad"] = {"wrt": list(grad_wrt),
                              "seeds": [wire.pack(s, tensors)[0] for s in (grad_seeds or ())]}
            if param_grads:
                header["grad"]["params"] = list(param_grads)
        if count_ops:
            header["count_ops"] = True
        if echo_args:
            header["echo_args"] = True
        if launch is not None:
            header["launch"] = {"grid": [int(g) for g in launch]}
        try:
            reply = self._pool.call(header, tensors, timeout, measure_memory=measure_memory, helds=helds)
        except Exception as exc:
            self.outputs.append(getattr(exc, "output", "") or "")
            raise
        self.outputs.append(reply.output)
        devices = frozenset({"cpu", str(header["device"]).split(":")[0]})
        return self._decode(fn, reply, n_args=len(args), n_grads=len(grad_wrt) if grad_wrt or param_grads else None,
                            echo_args=echo_args, count_ops=count_ops, devices=devices, module=module)

    # -- internals -------------------------------------------------------------------------

    def _forbidden_in_source(self, fn: str) -> list[str]:
        """The forbidden APIs ``fn`` refers to in the learner's source (src/lumen_ex/harness/source_scan.py): the
        worker's own record of forbidden calls can be erased by the code it runs, the file cannot."""
        if not hasattr(self, "_scan"):
            pool = self._pool
            forbidden = list(pool.forbidden)
            folder = Path(pool.spec.module_dir) if forbidden else None   # None: no scan
            self._scan = (scan_file(folder / self.module_file, forbidden, data=pool.source)
                          if folder is not None else None)
            # files beside the learner's named like importable modules: refused with the scan
            self._shadows = shadowing_files(folder, self.module_file) if folder is not None else []
            self._scanned: dict[str, list[str]] = {}
        if self._scan is None:
            return []
        if fn not in self._scanned:
            self._scanned[fn] = self._scan.reached_from(fn)
        return self._scanned[fn]

    def _unverifiable_in_source(self, fn: str) -> list[str]:
        """Why the scan cannot prove that ``fn`` reaches no forbidden API (code it cannot follow, a
        file over its bounds); empty when it can. Called after _forbidden_in_source."""
        if not hasattr(self, "_scan") or self._scan is None:
            return []
        return self._shadows + [f.why for f in self._scan.unverifiable(fn)]

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

    def _decode(self, fn: str, reply: Reply, *, n_args: int, n_grads: int | None, echo_args: bool,
                count_ops: bool, devices: frozenset[str] = frozenset({"cpu"}),
                module: ModuleCall | None = None) -> CallResult:
        """Rebuild a reply, checking that its structure is what was asked for: a hostile worker must
        never make a hidden test's own arithmetic fail (that would be blamed on the grader). Any
        failure to decode it, of whatever type, is a protocol error charged to the submission, and
        the worker is replaced."""
        try:
            result, claimed = self._checked(reply, n_args=n_args, n_grads=n_grads, echo_args=echo_args,
                                            count_ops=count_ops, devices=devices, module=module)
        except LearnerError:
            # The worker refuses a forbidden API (src/lumen_ex/sandbox/inside/forbid.py): the call
            # raised. Say why, when the scan or the worker's hint names it, before the error.
            self._refuse_forbidden(fn, _claimed_or_none(reply.header) or [])
            raise
        except Exception as exc:  # noqa: BLE001  whatever a crafted reply made fail
            raise self._pool.protocol_failure(exc, reply.output) from None
        self._refuse_forbidden(fn, claimed)
        unverified = self._unverifiable_in_source(fn)
        if unverified:
            raise CheckFailed(Diagnosis(
                "forbidden", f"cannot be verified: your {self.module_file} {unverified[0]}"[:400],
                got=unverified[:5], details={"function": fn}, misconception="unverifiable-source",
                hint="The grader proves from your source that no forbidden library function is used, so it "
                     "accepts only code it can follow: write attributes and imports out (import torch, "
                     "torch.matmul), public names only, in one file."))
        return result

    def _refuse_forbidden(self, fn: str, claimed: list[str]) -> None:
        """A forbidden diagnosis when the scan (the proof) or the worker (a hint) names a forbidden API."""
        forbidden = claimed + [n for n in self._forbidden_in_source(fn) if n not in claimed]
        if not forbidden:
            return
        names = [short_api_name(n) for n in forbidden]
        listed = " and ".join(names) if len(names) <= 2 else ", ".join(names[:-1]) + " and " + names[-1]
        hints = {api.name: api.hint for api in self._pool.forbidden if api.hint}
        hint = next((hints[n] for n in forbidden if n in hints),
                    "Write it yourself from the operations the exercise's README shows.")
        read = None if claimed or self._scan is None else self._scan.read_only(fn, forbidden[0])
        what = (f"line {read.line} {read.why}, and no name of {short_api_name(read.api)} is allowed in this exercise"
                if read else f"calling {listed} is not allowed in this exercise")    # q.grad calls nothing
        raise CheckFailed(Diagnosis(
            "forbidden", f"implement it yourself; {what}",
            got=names, details={"function": fn}, misconception="forbidden-api", hint=hint))

    @staticmethod
    def _checked(reply: Reply, *, n_args: int, n_grads: int | None, echo_args: bool, count_ops: bool,
                 devices: frozenset[str], module: ModuleCall | None = None) -> tuple[CallResult, list[str]]:
        """The reply as a CallResult and the forbidden APIs the worker claims were called, or
        wire.ProtocolError (LearnerError when the worker reports that the learner's code raised)."""
        h, tensors = reply.header, reply.tensors
        if not wire_replies.check_ok(h):
            raise LearnerError(wire_replies.check_error(h.get("error")), reply.output)
        value = wire.unpack(h.get("result"), tensors, on_tensor=_annotator(devices), devices=devices)
        result = CallResult(value, output=reply.output, elapsed=reply.elapsed, memory=reply.memory)
        _decode_grads(result, h.get("grads"), tensors, n_grads, devices,
                      module.param_grads if module is not None else ())
        if module is not None and module.describe:
            result.parameters, result.parameter_count = checked_parameters(h.get("params"))
        if count_ops:
            result.ops = _checked_ops(h.get("ops"))
        if echo_args:
            result.args_after = wire.unpack(h.get("args_after"), tensors, devices=devices)
            _require(isinstance(result.args_after, tuple) and len(result.args_after) == n_args,
                     "the arguments were not echoed back one for one")
        claimed = _claimed_or_none(h)
        if claimed is None:
            raise wire.ProtocolError("the list of forbidden calls is malformed")
        return result, claimed


def _claimed_or_none(header: dict[str, Any]) -> list[str] | None:
    """The forbidden APIs the worker says the call tried (a hint), or None when the list is malformed.
    Each must be a dotted name, as every forbidden API is (src/lumen_ex/core/forbidden.py DOTTED): the
    names are written into the failure's summary, and a worker's text must not bring lines of its own."""
    claimed = header.get("forbidden", [])
    if not (isinstance(claimed, list) and len(claimed) <= wire.MAX_TENSORS
            and all(type(n) is str and len(n) <= MAX_API_NAME and DOTTED.fullmatch(n) for n in claimed)):
        return None
    return list(claimed)


def _decode_grads(result: CallResult, grads: Any, tensors: list[torch.Tensor], n_grads: int | None,
                  devices: frozenset[str], param_names: tuple[str, ...] = ()) -> None:
    """The gradients of a reply (or why there are none) onto ``result``. ``grads``: the reply's
    field as the worker sent it (any JSON value), checked here before it is used."""
    if grads is None:
        _require(n_grads is None, "gradients were asked for and not sent")
        return
    _require(isinstance(grads, dict) and n_grads is not None, "gradients are malformed or were not asked for")
    if "error" in grads:
        _require(type(grads["error"]) is str, "the gradient error is not a string")
        result.grad_error = wire.clean_text(grads["error"], 300)
        return
    result.grads = wire.unpack(grads.get("grads"), tensors, devices=devices)
    _require(isinstance(result.grads, tuple) and len(result.grads) == n_grads
             and all(g is None or isinstance(g, torch.Tensor) for g in result.grads),
             "gradients are not one tensor (or None) per requested input")
    if param_names:
        params = wire.unpack(grads.get("params"), tensors, devices=devices)
        _require(isinstance(params, tuple) and len(params) == len(param_names)
                 and all(g is None or isinstance(g, torch.Tensor) for g in params),
                 "parameter gradients are not one tensor (or None) per requested parameter")
        result.param_grads = dict(zip(param_names, params))


def _checked_ops(ops: Any) -> dict[str, Any]:
    """The work counter's summary: counts as non-negative ints, the largest op's name and shape, the
    matrix products' FLOPs (an int, or None where the worker sent none).
    ``ops``: the reply's field as the worker sent it (any JSON value), checked here before it is used."""
    _require(isinstance(ops, dict) and all(type(ops.get(k)) is int and ops[k] >= 0
                                           for k in ("total_elements", "ops", "largest")),
             "the work counter's summary is missing or malformed")
    shape = ops.get("largest_shape", [])
    _require(type(ops.get("largest_op", "")) is str and isinstance(shape, list) and len(shape) <= wire.MAX_DIMS
             and all(type(d) is int and d >= 0 for d in shape), "the work counter's summary is malformed")
    flops = ops.get("matmul_flops")     # the FLOPs of the matrix products (work_counter.py); None when not sent
    _require(flops is None or (type(flops) is int and flops >= 0), "the work counter's summary is malformed")
    return {"total_elements": ops["total_elements"], "ops": ops["ops"], "largest": ops["largest"],
            "largest_op": wire.clean_text(ops.get("largest_op", ""), 100), "largest_shape": list(shape),
            "matmul_flops": flops}


def _require(ok: bool, what: str) -> None:
    if not ok:
        raise wire.ProtocolError(what)


def short_api_name(dotted: str) -> str:
    """How feedback names an API: F. for torch.nn.functional, nn. for torch.nn."""
    for prefix, short in (("torch.nn.functional.", "F."), ("torch.nn.", "nn.")):
        if dotted.startswith(prefix):
            return short + dotted[len(prefix):]
    return dotted

"""The worker's own layer against forbidden APIs: make them unusable before the learner's code runs.

The proof that a learner wrote a function themselves is the harness's source scan
(src/lumen_ex/harness/source_scan.py). This is a second, independent layer, inside the worker: for
every forbidden API the exercise data names (src/lumen_ex/core/forbidden.py, sent in the ``load``
request), before the learner's module is imported,

- every dotted Python name (the API, its aliases, the library APIs built on it) is replaced by a
  function that refuses to run; a class keeps its name but its ``__init__`` and ``forward`` refuse;
  a C function is replaced on the module it was defined in too (``torch._C._nn``);
- every dispatcher operator (``aten::_scaled_dot_product_flash_attention_for_cpu``) gets a refusing
  kernel at each dispatch key that has one, so the work cannot be reached by any Python route:
  ``torch.ops``, a name built from a string, a reference the scan did not see.

A refusal raises :class:`ForbiddenAPIError` and records the API in ``called`` (sent back with the
reply as a hint for the feedback). The learner's code shares this process and could undo much of
this on purpose; what it cannot do is pass by accident of a route the scan missed. The harness
never relies on this layer for a verdict: it adds a failure, never a pass.

Like every file of this folder it runs inside the sandbox, so it imports only the standard library
and torch.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import warnings

import torch

TYPE_CHECKING = False   # typing.TYPE_CHECKING, without importing typing here (as in worker.py)
if TYPE_CHECKING:
    import types
    from collections.abc import Callable, Sequence
    from importlib.machinery import ModuleSpec
    from typing import Any, Literal, NoReturn

# Dispatch keys a kernel may be registered at; a refusing kernel replaces each one an operator has.
KEYS = ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional",
        "CPU", "CUDA", "MPS", "XPU", "Meta", "QuantizedCPU", "QuantizedCUDA", "SparseCPU", "SparseCUDA")
MAX_NAMES = 256          # names and kernels per load request: the header is the harness's, but bounded anyway

called: list[str] = []   # the forbidden APIs the learner's code tried to call, in order
_libraries: dict[str, torch.library.Library] = {}    # namespace -> torch.library.Library: kept alive, or its kernels are dropped


class ForbiddenAPIError(RuntimeError):
    """Raised by every refused name and kernel."""


def disable(entries: list[dict[str, Any]]) -> list[str]:
    """Make every API of ``entries`` (``{"api", "names", "kernels"}`` dicts, core/forbidden.py
    ``ForbiddenAPI.to_wire``) unusable; returns what could not be found (for the record only: a
    name this torch lacks cannot be reached either)."""
    missing: list[str] = []
    for entry in list(entries)[:MAX_NAMES]:
        api = str(entry.get("api", ""))
        for dotted in [str(n) for n in entry.get("names", [])][:MAX_NAMES]:
            if not _replace(dotted, api):
                missing.append(dotted)
        for kernel in [str(k) for k in entry.get("kernels", [])][:MAX_NAMES]:
            if not _refuse_kernel(kernel, api):
                missing.append(kernel)
    return missing


AUTOGRAD_API = "torch.enable_grad"     # what a learner reads when their code tries to turn autograd on


def autograd_off() -> None:
    """Autograd off in this process, for an exercise whose learner writes a gradient by hand
    (exercise.toml ``autograd = false``): grad mode and forward-mode AD are switched off before the
    learner's module is imported, so no operation records a graph (no ``grad_fn`` to walk, nothing
    for ``.backward()`` to run), and the three switches every Python route goes through
    (``torch.enable_grad``, ``set_grad_enabled``, ``inference_mode(False)``, their decorators and
    torch.func's transforms all call them) refuse to turn them back on. Turning them off (``torch.no_grad()``,
    ``inference_mode()``) still works. Grad mode is per thread and a new one starts with it on: a
    thread started through ``threading`` turns it off before it runs anything (and the source scan
    admits no module that starts a thread or a process: src/lumen_ex/harness/scan_rules.py)."""
    set_grad, set_fwd_grad, inference_mode = (torch._C._set_grad_enabled, torch._C._set_fwd_grad_enabled,
                                              torch._C._InferenceMode)

    def refuse(what: str) -> NoReturn:
        called.append(AUTOGRAD_API)
        raise ForbiddenAPIError(f"{what} is not allowed in this exercise (autograd is off: it would compute "
                                "the gradient you are to write): implement it yourself")

    def set_grad_enabled(mode: bool) -> None:
        if mode:
            refuse("turning autograd on")
        set_grad(False)

    def set_fwd_grad_enabled(mode: bool) -> None:
        if mode:
            refuse("turning forward-mode autograd on")
        set_fwd_grad(False)

    def inference_mode_guard(mode: bool = True) -> object:
        if not mode:
            refuse("leaving inference mode (inference_mode(False) turns autograd on)")
        return inference_mode(True)

    def off() -> None:     # in the calling thread (grad mode is per thread)
        set_grad(False)
        set_fwd_grad(False)

    bootstrap = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]  # CPython's, private

    def bootstrap_off(thread: threading.Thread) -> None:
        off()
        bootstrap(thread)

    threading.Thread._bootstrap_inner = bootstrap_off   # type: ignore[attr-defined]
    off()
    torch._C._set_grad_enabled = set_grad_enabled              # type: ignore[assignment]
    torch._C._set_fwd_grad_enabled = set_fwd_grad_enabled      # type: ignore[assignment]
    torch._C._InferenceMode = inference_mode_guard            # type: ignore[assignment,misc]


def refusal(api: str, what: str) -> Callable[..., NoReturn]:
    """A function standing in for ``what`` (a name or kernel of ``api``) that refuses to run."""

    def refused(*args: object, **kwargs: object) -> NoReturn:
        called.append(api)
        raise ForbiddenAPIError(f"{what} is not allowed in this exercise (it is, or calls, {api}): "
                                "implement it yourself")

    refused.__name__ = what.rpartition(".")[2].rpartition("::")[2]
    refused.__qualname__ = refused.__name__
    return refused


def _resolve(dotted: str) -> tuple[object, str, object] | Literal["later"] | None:
    """(owner, attribute name, current value) for a dotted name whose module is already imported;
    None when torch lacks it. A module not imported yet is never imported here (some take seconds):
    :class:`_OnImport` makes its names unusable when something imports it."""
    owner_path, _, attr = dotted.rpartition(".")
    parts = owner_path.split(".")
    for cut in range(len(parts), 0, -1):                 # the longest imported module, then attributes
        module = sys.modules.get(".".join(parts[:cut]))
        if module is None:
            continue
        owner: object = module
        for part in parts[cut:]:
            owner = getattr(owner, part, None)
            if owner is None:
                if _on_import.watch(".".join(parts[:cut + 1]), dotted):
                    return "later"
                return None
        target = getattr(owner, attr, None)
        return None if target is None else (owner, attr, target)
    return None


class _OnImport:
    """A finder that sees a watched module imported (by anyone, later) and makes its forbidden names
    unusable as soon as it has run: the module is found and loaded by the other finders as always."""

    def __init__(self) -> None:
        self.pending: dict[str, list[str]] = {}          # module -> dotted names to replace in it
        self.apis: dict[str, str] = {}                   # dotted name -> its API
        self.installed = False

    def watch(self, module: str, dotted: str) -> bool:
        try:
            if importlib.util.find_spec(module) is None:  # (finds it without running it)
                return False
        except (ImportError, ValueError):
            return False
        self.pending.setdefault(module, []).append(dotted)
        if not self.installed:
            sys.meta_path.insert(0, self)
            self.installed = True
        return True

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: types.ModuleType | None = None) -> ModuleSpec | None:
        if fullname not in self.pending:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                loader, names = spec.loader, self.pending[fullname]
                run = loader.exec_module

                def exec_module(module: types.ModuleType, _run: Callable[[types.ModuleType], None] = run,
                                _names: list[str] = names) -> None:
                    _run(module)
                    for dotted in _names:
                        _replace(dotted, self.apis.get(dotted, dotted))

                loader.exec_module = exec_module  # type: ignore[method-assign]  # on purpose: this loader only
                return spec
        return None


_on_import = _OnImport()


def _replace(dotted: str, api: str) -> bool:
    _on_import.apis[dotted] = api
    found = _resolve(dotted)
    if found is None or found == "later":
        return found == "later"
    owner, attr, target = found
    if isinstance(target, type):
        for method in ("__init__", "forward"):
            if hasattr(target, method):
                setattr(target, method, refusal(api, f"{dotted}.{method}"))
        return True
    stand_in = refusal(api, dotted)
    setattr(owner, attr, stand_in)
    defined_on = getattr(target, "__self__", None)           # a C function: torch._C._nn for SDPA
    if defined_on is not None and getattr(defined_on, attr, None) is target:
        try:
            setattr(defined_on, attr, stand_in)
        except (AttributeError, TypeError):
            pass
    return True


def _refuse_kernel(kernel: str, api: str) -> bool:
    """A refusing kernel for every overload of ``kernel`` ("aten::name" or "aten::name.overload")
    at every dispatch key it has one."""
    namespace, _, op = kernel.partition("::")
    name, _, only = op.partition(".")
    try:
        packet = getattr(getattr(torch.ops, namespace), name)
        overloads = [only] if only else list(packet.overloads())
    except (AttributeError, RuntimeError):
        return False
    library = _libraries.get(namespace)
    if library is None:
        library = _libraries[namespace] = torch.library.Library(namespace, "IMPL")  # type: ignore[no-untyped-call]  # torch's, unannotated
    refused = refusal(api, kernel)
    done = False
    for overload in overloads:
        qualified = name if overload == "default" else f"{name}.{overload}"
        for key in KEYS:
            try:
                has = torch._C._dispatch_has_kernel_for_dispatch_key(f"{namespace}::{qualified}", key)
            except RuntimeError:    # a name torch.ops lists with no dispatcher operator (aten::grad,
                break               # aten::backward: TorchScript built-ins): no kernel to refuse
            if has:
                try:
                    with warnings.catch_warnings():     # "overriding a kernel": not the learner's output
                        warnings.simplefilter("ignore")
                        library.impl(qualified, refused, key)  # type: ignore[no-untyped-call]  # (as above)
                    done = True
                except RuntimeError:
                    pass
    return done

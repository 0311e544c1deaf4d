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

import torch

# Dispatch keys a kernel may be registered at; a refusing kernel replaces each one an operator has.
KEYS = ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional",
        "CPU", "CUDA", "MPS", "XPU", "Meta", "QuantizedCPU", "QuantizedCUDA", "SparseCPU", "SparseCUDA")
MAX_NAMES = 256          # names and kernels per load request: the header is the harness's, but bounded anyway

called: list[str] = []   # the forbidden APIs the learner's code tried to call, in order
_libraries: dict = {}    # namespace -> torch.library.Library: kept alive, or its kernels are dropped


class ForbiddenAPIError(RuntimeError):
    """Raised by every refused name and kernel."""


def disable(entries: list) -> list[str]:
    """Make every API of ``entries`` (``{"api", "names", "kernels"}`` dicts, core/forbidden.py
    ``ForbiddenAPI.to_wire``) unusable; returns what could not be found (for the record only: a
    name this torch lacks cannot be reached either)."""
    missing = []
    for entry in list(entries)[:MAX_NAMES]:
        api = str(entry.get("api", ""))
        for dotted in [str(n) for n in entry.get("names", [])][:MAX_NAMES]:
            if not _replace(dotted, api):
                missing.append(dotted)
        for kernel in [str(k) for k in entry.get("kernels", [])][:MAX_NAMES]:
            if not _refuse_kernel(kernel, api):
                missing.append(kernel)
    return missing


def refusal(api: str, what: str):
    """A function standing in for ``what`` (a name or kernel of ``api``) that refuses to run."""

    def refused(*args, **kwargs):
        called.append(api)
        raise ForbiddenAPIError(f"{what} is not allowed in this exercise (it is, or calls, {api}): "
                                "implement it yourself")

    refused.__name__ = what.rpartition(".")[2].rpartition("::")[2]
    refused.__qualname__ = refused.__name__
    return refused


def _resolve(dotted: str):
    """(owner, attribute name, current value) for a dotted name, or None when torch lacks it."""
    owner_path, _, attr = dotted.rpartition(".")
    try:
        owner = importlib.import_module(owner_path)
    except ImportError:
        head, *rest = owner_path.split(".")
        try:
            owner = importlib.import_module(head)
            for part in rest:
                owner = getattr(owner, part)
        except (ImportError, AttributeError):
            return None
    target = getattr(owner, attr, None)
    return None if target is None else (owner, attr, target)


def _replace(dotted: str, api: str) -> bool:
    found = _resolve(dotted)
    if found is None:
        return False
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
        library = _libraries[namespace] = torch.library.Library(namespace, "IMPL")
    refused = refusal(api, kernel)
    done = False
    for overload in overloads:
        qualified = name if overload == "default" else f"{name}.{overload}"
        for key in KEYS:
            if torch._C._dispatch_has_kernel_for_dispatch_key(f"{namespace}::{qualified}", key):
                try:
                    library.impl(qualified, refused, key)
                    done = True
                except RuntimeError:
                    pass
    return done

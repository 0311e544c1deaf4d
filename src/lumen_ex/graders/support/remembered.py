"""Known wrong answers remembered by the content of the inputs they were computed from.

A failing check names its mistake by computing every known wrong answer (an exercise's variants)
on the test's inputs and keeping those that differ from the reference (``mistakes.candidates``).
Those inputs are the hidden suite's own, made from the seed alone, so the same test at the same
seed computes the same candidates for every file that fails it: every save in watch mode or the
playground, every buggy file of a class graded by one process, every corpus file of ``dev check``.
The grading process computes them once and remembers them here; only the comparison with the
learner's values runs again.

What makes an entry safe to reuse is its key, built from content, never from identity alone:

- the variants function's code (a code object compares by its bytecode and constants) and the
  module namespace it reads its names from (a suite imported again after an edit has a new one).
  The names themselves (a suite's constants and helpers) are taken as fixed while their module
  lives: no built-in suite assigns to its own module's names while it runs, and a pack's must not
  rely on its variants being computed again if it does;
- everything the function closes over, its defaults included, by value: tensors by dtype, shape,
  strides and a hash of their values (CPU tensors only), numbers and strings by ``repr``, containers and
  dataclasses item by item, functions as above;
- the reference the candidates were separated from, and the tolerance.

Anything else (an object whose state cannot be read as values, a tensor on another device, a key
of more than ``MAX_NODES`` parts) makes the key None, and the candidates are then computed as
before, every time. The same bytes give the same candidates either way: they are pure functions of
the trusted inputs (src/lumen_ex/graders/support/mistakes.py ``name_mistake``). What is remembered is
bounded by ``MAX_ENTRIES`` entries and ``MAX_BYTES`` of tensor data, the least recently used
forgotten first.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import types
from collections import OrderedDict
from typing import Any, Callable, Hashable, TypeVar

import torch

MAX_ENTRIES = 512                # remembered results, at most
MAX_BYTES = 128 * 2**20          # ... holding at most this much tensor data
MAX_NODES = 4096                 # parts of one key (tensors, numbers, items): more and it is not remembered
MAX_DEPTH = 12

T = TypeVar("T")


class _Unkeyable(Exception):
    """A value whose content this module cannot read as a key."""


class Remembered:
    """A bounded map from content keys to results (least recently used forgotten first), with the
    count of results computed and reused (for tests and benchmarks)."""

    def __init__(self, *, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> None:
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._entries: OrderedDict[Hashable, tuple[Any, int, tuple[Any, ...]]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()       # a process may run two suites at once (the playground)
        self.computed = self.reused = 0
        self.enabled = True

    def get(self, key: Hashable | None, compute: Callable[[], T], *, size: Callable[[T], int],
            hold: tuple[Any, ...] = ()) -> T:
        """The result remembered under ``key``, or ``compute()`` (remembered when ``key`` is not None).
        ``size`` gives a result's bytes; ``hold`` keeps alive what the key names by identity."""
        if key is None or not self.enabled:
            self.computed += 1
            return compute()
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                self.reused += 1
                return found[0]
        value = compute()                   # outside the lock: two threads may both compute it
        nbytes = size(value)
        with self._lock:
            self.computed += 1
            if nbytes <= self.max_bytes and key not in self._entries:
                self._entries[key] = (value, nbytes, hold)
                self._bytes += nbytes
                while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                    _, (_, dropped, _) = self._entries.popitem(last=False)
                    self._bytes -= dropped
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)


def content_key(*values: Any) -> tuple[Hashable, tuple[Any, ...]] | None:
    """A hashable key for ``values`` made from their content, and the objects it names by identity
    (to be kept alive with the entry, so that no other object can take their ids); None when some
    part cannot be read as content (see the module docstring)."""
    held: list[Any] = []
    budget = [MAX_NODES]
    try:
        return tuple(_key(v, held, budget, 0) for v in values), tuple(held)
    except Exception:     # noqa: BLE001  _Unkeyable, an empty closure cell, a tensor that will not hash...
        return None       # ... are computed every time: building a key never fails a check


def _key(value: Any, held: list[Any], budget: list[int], depth: int) -> Hashable:
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        raise _Unkeyable("too large")
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return (type(value).__name__, repr(value))
    if isinstance(value, (torch.dtype, torch.device, torch.layout)):
        return (type(value).__name__, str(value))
    if isinstance(value, torch.Tensor):
        return _tensor_key(value)
    if isinstance(value, slice):
        return ("slice", *(_key(p, held, budget, depth + 1) for p in (value.start, value.stop, value.step)))
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, *(_key(v, held, budget, depth + 1) for v in value))
    if isinstance(value, dict):
        return ("dict", *((_key(k, held, budget, depth + 1), _key(v, held, budget, depth + 1))
                          for k, v in value.items()))
    if isinstance(value, types.FunctionType):
        held.append(value.__globals__)
        cells = tuple(_key(c.cell_contents, held, budget, depth + 1) for c in value.__closure__ or ())
        return ("function", value.__code__, id(value.__globals__), cells,
                _key(value.__defaults__, held, budget, depth + 1),
                _key(value.__kwdefaults__, held, budget, depth + 1))
    if isinstance(value, types.MethodType):
        return ("method", _key(value.__func__, held, budget, depth + 1), _key(value.__self__, held, budget, depth + 1))
    if isinstance(value, types.ModuleType) or isinstance(value, type):
        held.append(value)
        return (type(value).__name__, getattr(value, "__qualname__", value.__name__), id(value))
    if dataclasses.is_dataclass(value):
        held.append(type(value))
        return ("dataclass", id(type(value)), *((f.name, _key(getattr(value, f.name), held, budget, depth + 1))
                                                for f in dataclasses.fields(value)))
    raise _Unkeyable(type(value).__name__)


def _tensor_key(t: torch.Tensor) -> Hashable:
    """A tensor's dtype, shape, strides, flags and a hash of its values (CPU only: another device's would
    have to be copied, and the suites' inputs are made on the CPU)."""
    if t.device.type != "cpu" or t.is_sparse or t.is_quantized or t.is_nested:
        raise _Unkeyable("tensor")
    flat = t.detach().resolve_conj().resolve_neg().reshape(-1).contiguous()     # (numel,)
    digest = hashlib.blake2b(flat.view(torch.uint8).numpy().tobytes(), digest_size=20).digest()
    return ("tensor", str(t.dtype), tuple(t.shape), tuple(t.stride()), t.requires_grad, digest)


def tensor_bytes(value: Any) -> int:
    """The bytes of tensor data in a result (a tensor, or a list or tuple of them, or of objects
    with a ``value`` tensor, and perhaps a ``slack`` one, such as mistakes.Variant)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    return sum(tensor_bytes(inner) for inner in (getattr(value, "value", None), getattr(value, "slack", None))
               if isinstance(inner, torch.Tensor))

"""Values the harness sends a worker once and then names: a model's weights, say.

A suite that passes the same large argument to every call (exercise 13 sends 1.6 MB of weights
to each of its 140 calls) wraps it in :class:`Held` (``lumen_ex.author.Held``). The harness sends
its value to each worker once, in a ``{"op": "hold", "key": ..., "value": ...}`` request; every
call after that carries ``{"$held": key}`` in its place (requests only: a reply that names one is
a protocol error, as with ``$dict``).

The worker keeps what it was sent here and gives every call a copy of its own, on the call's
device: a function that changes an argument in place changes that call's copy only, exactly as
when the value travelled with the call. The store is bounded (MAX_HELD values per worker, each
within a frame's caps, since it arrives as one). The learner's code shares this process and could
reach the store; what it could change is only what its own later calls see, which the harness
grades against its own copy.

Like every file of this folder it runs inside the sandbox (and is imported by the harness too, for
:class:`Held`), so it imports only the standard library and torch.
"""

from __future__ import annotations

import itertools

import torch

TYPE_CHECKING = False   # typing.TYPE_CHECKING, without importing typing here (as in worker.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

MAX_HELD = 16            # values one worker keeps
MAX_KEY = 32             # characters of a key

_keys = itertools.count()
store: dict[str, object] = {}     # the worker's: key -> the value as it arrived (CPU tensors)


class Held:
    """An argument sent to each worker once, then named (the harness's side).

    ``Held(value)`` may stand wherever a call's argument may, at the top level or inside a tuple,
    list or dict; its value must not change afterwards (a worker that has it is not sent it again).
    """

    __slots__ = ("key", "value")

    def __init__(self, value: object):
        self.key = f"held-{next(_keys)}"
        self.value = value

    def __repr__(self) -> str:
        return f"Held({self.key})"


def hold(key: object, value: object) -> None:
    """Keep ``value`` (already unpacked from a ``hold`` request) under ``key``."""
    if type(key) is not str or not 0 < len(key) <= MAX_KEY:
        raise ValueError("a held value's key must be a short string")
    if key not in store and len(store) >= MAX_HELD:
        raise ValueError(f"a worker holds at most {MAX_HELD} values")
    store[key] = value


def resolver(device: torch.device | str) -> Callable[[str], Any]:
    """What a call's unpacking uses for ``{"$held": key}``: a fresh copy of the held value, each
    tensor copied once, onto the call's ``device``."""
    def fresh(value: object) -> Any:
        if isinstance(value, torch.Tensor):
            return value.to(device, copy=True)
        if isinstance(value, (tuple, list)):
            return type(value)(fresh(v) for v in value)
        if isinstance(value, dict):
            return {k: fresh(v) for k, v in value.items()}
        return value

    def resolve(key: str) -> Any:
        if key not in store:
            raise KeyError(f"no value is held under {key!r}")
        return fresh(store[key])
    return resolve

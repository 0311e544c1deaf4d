"""The worker's work counter: how much a learner's call computed, for a call request with
``"count_ops": true`` (the reply's ``ops``; src/lumen_ex/harness/proxy.py ``_checked_ops`` reads it).

It counts the elements every tensor op produces, and the largest single intermediate, through a
``TorchDispatchMode``: backend-agnostic, where FlopCounterMode misses CPU SDPA and
broadcast-multiply-sum attention. It runs in the learner's process, which can patch it: its summary
is a hint that can only fail a test, never pass one.

Like every file of this folder it runs inside the sandbox (worker.py imports it from the folder
made a package, ``lumen_inside``, in ``prepare``), so it imports only the standard library and torch.
"""

from __future__ import annotations

import torch

TYPE_CHECKING = False   # typing.TYPE_CHECKING, without importing typing here (as in worker.py)
if TYPE_CHECKING:
    from typing import Any

    from torch.utils._python_dispatch import TorchDispatchMode


class WorkCounter:
    """Counts the elements every tensor op produces, and the largest single intermediate, while
    entered (``with counter:``)."""

    def __init__(self) -> None:
        self.mode = _counting_mode(self)
        self.total, self.ops, self.largest, self.largest_op = 0, 0, 0, ""
        self.largest_shape: list[int] = []

    def record(self, op: str, t: torch.Tensor) -> None:
        n = t.numel()
        self.total += n
        self.ops += 1
        if n > self.largest:
            self.largest, self.largest_op, self.largest_shape = n, op, list(t.shape)

    def __enter__(self) -> WorkCounter:
        self.mode.__enter__()  # type: ignore[no-untyped-call]  # torch's TorchDispatchMode is unannotated
        return self

    def __exit__(self, *exc: object) -> None:
        self.mode.__exit__(*exc)  # type: ignore[no-untyped-call]  # (as above)

    def summary(self) -> dict[str, int | str | list[int]]:
        return {"total_elements": self.total, "ops": self.ops, "largest": self.largest,
                "largest_op": self.largest_op, "largest_shape": self.largest_shape}


def _counting_mode(counter: WorkCounter) -> TorchDispatchMode:
    """A dispatch mode that hands every tensor an op returns to ``counter.record``, with the op's name."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Mode(TorchDispatchMode):  # type: ignore[no-untyped-call]  # its __init_subclass__ is unannotated
        _should_skip_dynamo = classmethod(lambda cls: False)  # else first use imports torch._dynamo (1.5 s)

        def __torch_dispatch__(self, func: Any, types: object, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            result = func(*args, **(kwargs or {}))
            for t in result if isinstance(result, (tuple, list)) else (result,):
                if isinstance(t, torch.Tensor):
                    counter.record(str(func.overloadpacket.__name__), t)
            return result

    return _Mode()  # type: ignore[no-untyped-call]  # (as above)

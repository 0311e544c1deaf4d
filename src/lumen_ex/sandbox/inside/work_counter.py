"""The worker's work counter: how much a learner's call computed, for a call request with
``"count_ops": true`` (the reply's ``ops``; src/lumen_ex/harness/proxy.py ``_checked_ops`` reads it).

It counts the elements every tensor op produces, the largest single intermediate, and the
floating-point operations of the matrix products (``matmul_flops``: 2·m·k·n for an (m, k) @ (k, n)
product, whatever wrote it: ``@``, ``matmul``, ``einsum``, ``bmm``, ``linear`` all reach torch's
``mm``/``bmm`` family below the dispatcher), through a ``TorchDispatchMode``: backend-agnostic,
where FlopCounterMode misses CPU SDPA and broadcast-multiply-sum attention.

It runs in the learner's process, which could patch it: its summary is a hint. Where a high count
fails a test (an O(L^2) intermediate) that is all it can do; where a low count passes one (the
causal-skip tests of exercises 5 and 9) only the source scan stands behind it, which refuses the
code that could reach this module (sys.modules, private names: tests/sandbox/test_forbidden.py
``test_patched_work_counter_fails``); no measurement of the grader's own backs those two.

Like every file of this folder it runs inside the sandbox (worker.py imports it from the folder
made a package, ``lumen_inside``, in ``prepare``), so it imports only the standard library and torch.
"""

from __future__ import annotations

import torch

TYPE_CHECKING = False   # typing.TYPE_CHECKING, without importing typing here (as in worker.py)
if TYPE_CHECKING:
    from typing import Any

    from torch.utils._python_dispatch import TorchDispatchMode


# The matrix products torch's dispatcher sees (the ops ``@``, ``matmul``, ``einsum``, ``tensordot`` and
# ``linear`` decompose into), and which of their arguments is the left factor: a product's FLOPs are
# 2 x (elements of its result) x (the left factor's last axis, the one summed over); ``addbmm`` also
# sums over the batch (its left factor's first axis).
MATMUL_LEFT = {"mm": 0, "bmm": 0, "mv": 0, "dot": 0, "vdot": 0, "addmm": 1, "baddbmm": 1, "addmv": 1,
               "addbmm": 1}


class WorkCounter:
    """Counts the elements every tensor op produces, the largest single intermediate, and the FLOPs
    of the matrix products, while entered (``with counter:``)."""

    def __init__(self) -> None:
        self.mode = _counting_mode(self)
        self.total, self.ops, self.largest, self.largest_op = 0, 0, 0, ""
        self.largest_shape: list[int] = []
        self.matmul_flops = 0

    def record_product(self, op: str, args: tuple[Any, ...], out: torch.Tensor) -> None:
        """Adds the FLOPs of one matrix product ``op`` (a name of MATMUL_LEFT) that returned ``out``."""
        left = args[MATMUL_LEFT[op]] if len(args) > MATMUL_LEFT[op] else None
        if not isinstance(left, torch.Tensor) or left.dim() == 0:
            return
        summed = left.shape[-1] * (left.shape[0] if op == "addbmm" else 1)
        self.matmul_flops += 2 * out.numel() * summed

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
                "largest_op": self.largest_op, "largest_shape": self.largest_shape,
                "matmul_flops": self.matmul_flops}


def _counting_mode(counter: WorkCounter) -> TorchDispatchMode:
    """A dispatch mode that hands every tensor an op returns to ``counter.record``, with the op's name."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Mode(TorchDispatchMode):  # type: ignore[no-untyped-call]  # its __init_subclass__ is unannotated
        _should_skip_dynamo = classmethod(lambda cls: False)  # else first use imports torch._dynamo (1.5 s)

        def __torch_dispatch__(self, func: Any, types: object, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            result = func(*args, **(kwargs or {}))
            name = str(func.overloadpacket.__name__)
            for t in result if isinstance(result, (tuple, list)) else (result,):
                if isinstance(t, torch.Tensor):
                    counter.record(name, t)
            if name in MATMUL_LEFT and isinstance(result, torch.Tensor):
                counter.record_product(name, args, result)
            return result

    return _Mode()  # type: ignore[no-untyped-call]  # (as above)

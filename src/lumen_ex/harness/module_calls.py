"""``submission.call(cls, ..., module=ModuleCall(...))``: how the harness asks the worker to build a
learner's ``nn.Module`` class and call it, and the check of the parameter list the worker sends back.

The worker's side is src/lumen_ex/sandbox/inside/module_call.py ``module_instance`` and
``describe_parameters``; the rest of the reply (the output, the gradients, parameter gradients by
name) is decoded with every other call's in src/lumen_ex/harness/proxy.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from lumen_ex.sandbox.inside import wire


@dataclass(frozen=True)
class ModuleCall:
    """``submission.call(cls, args, kwargs, module=ModuleCall(...))``: ``cls`` names an ``nn.Module``
    class of the learner's file. The worker builds ``cls(*init_args, **init_kwargs)``, moves it with
    ``.to(dtype)`` (when given) and ``.to(device)`` (the call's device), loads ``state_dict`` with
    ``load_state_dict(..., strict=True)`` (when given: the harness's own tensors, so names and
    shapes must match), then calls ``method`` (``"__call__"``: the module itself, hooks and all)
    with the call's arguments (None: nothing is called, the value is None: a constructor's test). Anything that raises on the way is the learner's exception
    (``LearnerError``, with its type: a constructor's ``ValueError`` too).

    param_grads: with ``grad_seeds``, also the gradients of ``sum(output * seed)`` with respect to
    these parameters, by name (``CallResult.param_grads``; None for a name the module lacks, or a
    parameter the output does not depend on). describe: also ``named_parameters()``'s names, shapes
    and dtypes (``CallResult.parameters``, the first MAX_TENSORS of ``CallResult.parameter_count``):
    what the worker claims, which a suite may fail a test on, never pass one on.

    Example (exercise 7: the learner's GroupedQueryAttention with the reference's weights)::

        spec = ModuleCall((24, 6, 2), dtype=torch.float32, state_dict=ref_module.state_dict(),
                          param_grads=("q_proj.weight", "o_proj.weight"))
        result = submission.call("GroupedQueryAttention", (x,), {"causal": True}, module=spec,
                                 grad_wrt=(0,), grad_seeds=(g,))"""

    init_args: tuple[Any, ...] = ()
    init_kwargs: dict[str, Any] = field(default_factory=dict)
    dtype: torch.dtype | None = None
    state_dict: dict[str, torch.Tensor] | None = None
    method: str | None = "__call__"
    param_grads: tuple[str, ...] = ()
    describe: bool = False

    def __post_init__(self) -> None:
        if len(self.param_grads) > wire.MAX_TENSORS // 2 or len(self.state_dict or {}) > wire.MAX_TENSORS // 2:
            raise ValueError(f"a module call sends and asks for at most {wire.MAX_TENSORS // 2} parameters")
        if self.dtype is not None and self.dtype not in wire.DTYPE_NAMES:
            raise ValueError(f"a module cannot be sent to {self.dtype}")

    def header(self, tensors: list[torch.Tensor]) -> dict[str, Any]:
        """The request's "module" field (src/lumen_ex/sandbox/inside/module_call.py module_instance)."""
        out: dict[str, Any] = {
            "init_args": wire.pack(tuple(self.init_args), tensors)[0],
            "init_kwargs": {k: wire.pack(v, tensors)[0] for k, v in self.init_kwargs.items()},
            "method": self.method, "describe": self.describe}
        if self.dtype is not None:
            out["dtype"] = wire.DTYPE_NAMES[self.dtype]
        if self.state_dict is not None:
            names = list(self.state_dict)
            out["state"] = {"names": names,
                            "values": wire.pack(tuple(self.state_dict[n].detach() for n in names), tensors)[0]}
        return out


@dataclass(frozen=True)
class ParameterInfo:
    """One entry of a module's ``named_parameters()``, as the worker describes it (a claim)."""

    name: str
    shape: tuple[int, ...]
    dtype: str


def checked_parameters(listing: Any) -> tuple[list[ParameterInfo], int]:
    """A module's named parameters as the worker describes them (module_call.py describe_parameters):
    at most MAX_TENSORS entries of [name, shape, dtype], and their count in all."""
    require(isinstance(listing, dict) and isinstance(listing.get("list"), list)
             and type(listing.get("count")) is int, "the module's parameter list is missing or malformed")
    entries, count = listing["list"], listing["count"]
    require(len(entries) <= wire.MAX_TENSORS and len(entries) <= count < wire.INT_LIMIT
             and (count == len(entries) or len(entries) == wire.MAX_TENSORS),
             "the module's parameter count does not match its list")
    out = []
    for entry in entries:
        require(isinstance(entry, list) and len(entry) == 3 and type(entry[0]) is str
                 and len(entry[0]) <= wire.MAX_PARAM_NAME and type(entry[2]) is str and len(entry[2]) <= 40
                 and isinstance(entry[1], list) and len(entry[1]) <= wire.MAX_DIMS
                 and all(type(d) is int and 0 <= d < wire.INT_LIMIT for d in entry[1]),
                 "a module parameter's description is malformed")
        out.append(ParameterInfo(wire.clean_text(entry[0], wire.MAX_PARAM_NAME), tuple(entry[1]), entry[2]))
    return out, count


def require(ok: bool, what: str) -> None:
    if not ok:
        raise wire.ProtocolError(what)

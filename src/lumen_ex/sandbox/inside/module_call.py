"""The worker's side of a call of the learner's ``nn.Module`` class (a request with "module":
src/lumen_ex/harness/module_calls.py is the harness's side): the instance built as asked, and its
parameters described. Whatever raises on the way is the learner's (the worker replies with it).

Like every file of this folder it runs inside the sandbox, so it imports only the standard library,
torch and its siblings.
"""

from __future__ import annotations

import torch

from . import wire

TYPE_CHECKING = False   # typing.TYPE_CHECKING, without importing typing here (as in worker.py)
if TYPE_CHECKING:
    from typing import Any


def module_instance(cls: Any, spec: dict[str, Any], tensors: list[torch.Tensor], device: torch.device) -> Any:
    """The learner's nn.Module class built as the harness asks (src/lumen_ex/harness/proxy.py
    ModuleCall): ``cls(*init_args, **init_kwargs)``, ``.to(dtype)`` when asked, ``.to(device)``, then
    ``load_state_dict(state, strict=True)`` with the harness's tensors when sent. Whatever raises on
    the way (a constructor refusing its sizes, a strict load that misses a name) is the learner's."""
    init_args = wire.unpack(spec.get("init_args", {"$tuple": []}), tensors)
    init_kwargs = {str(k): wire.unpack(v, tensors) for k, v in dict(spec.get("init_kwargs", {})).items()}
    instance = cls(*init_args, **init_kwargs)
    if spec.get("dtype"):
        instance = instance.to(wire.DTYPES[str(spec["dtype"])])
    instance = instance.to(device)
    state = spec.get("state")
    if state is not None:
        values = wire.unpack(state["values"], tensors)
        instance.load_state_dict(dict(zip((str(n) for n in state["names"]), values)), strict=True)
    return instance


def describe_parameters(instance: Any) -> dict[str, object]:
    """``named_parameters()`` as names, shapes and dtypes: the first MAX_TENSORS, each name cut to
    MAX_PARAM_NAME characters, and how many there are in all (a hint for the suite, never a proof)."""
    listed: list[object] = []
    count = 0
    for name, p in instance.named_parameters():
        count += 1
        if count <= wire.MAX_TENSORS:
            shape = [int(d) for d in p.shape][:wire.MAX_DIMS]
            listed.append([wire.clean_text(str(name), wire.MAX_PARAM_NAME), shape,
                           wire.DTYPE_NAMES.get(p.dtype, "other")])
    return {"count": count, "list": listed}

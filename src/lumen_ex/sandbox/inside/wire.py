"""The pipe format between the trusted harness and the untrusted worker.

A frame is a 4-byte big-endian header length, a UTF-8 JSON header of that length, then the raw
bytes of every tensor the header lists, in order. Values (arguments, return values, gradients)
travel as a small JSON tree in which tensors are references into that list:

    {"$tensor": 0}               a tensor (its dtype, shape and byte count are in header["tensors"])
    {"$tuple": [...]}            a tuple          {"$list": [...]}  a list
    {"$float": "nan"}            a non-finite float
    {"$device": "cuda:0"}        a torch.device (requests only)
    {"$dict": {"name": ...}}     a dict with string keys (requests only: a model's weights)
    {"$held": "held-0"}          a value the worker was sent once before (requests only: held.py)
    {"$object": "builtins.dict"} anything else a worker returned, described by its type only

This module is shared verbatim by both sides, so it imports only the standard library, torch and
its siblings in this folder (the only files a sandbox sees: src/lumen_ex/sandbox/bwrap.py binds the
folder at /lumen). The siblings are imported relatively, here and in the sandbox alike (worker.py
imports this folder as a package by its path: ``_wire_module``). Here: writing frames and values
(pack). The rest is in the siblings, and their public names (``__all__``) are re-exported from
here: the fixed terms (caps, dtypes, ProtocolError, Opaque) in wire_limits.py, reading and
validating in wire_decode.py. The checks of what a reply's header claims are the harness's alone
(src/lumen_ex/harness/wire_replies.py), so they are not bound into a sandbox.
Nothing here ever unpickles or evaluates what it reads: the receiving side accepts only strict
JSON (no NaN, 64-bit ints, bounded nesting), allow-listed dtypes and bounded shapes (strides
included), checks that each byte count matches its shape, caps every size before reading, treats
device tags as claims to check, and rebuilds brand-new plain ``torch.Tensor`` objects on the CPU.
A tensor on the ``meta`` device (shape and dtype, no data: how a CPU-only machine checks that code
honours a device argument) travels as a spec with ``"device": "meta"`` and no bytes, and is rebuilt
on ``meta``: a spec that says meta can carry no data, so it cannot pass for a real tensor.
Every failure to decode raises ``ProtocolError`` and nothing else (see wire_decode.py).
"""

from __future__ import annotations

import json
import math
import os

import torch

from .held import Held
from .wire_decode import (
    INT_LIMIT,
    FrameParser,
    build_tensor,
    check_device_tag,
    header_length,
    is_meta_spec,
    loads_header,
    parse_header,
    read_frame_blocking,
    unpack,
)
from .wire_limits import (
    DTYPE_NAMES,
    DTYPES,
    FRAME_LENGTH,
    ITEMSIZE,
    MAX_DEPTH,
    MAX_DIMS,
    MAX_FRAME_TENSOR_BYTES,
    MAX_HEADER_BYTES,
    MAX_PARAM_NAME,
    MAX_STRING,
    MAX_TENSOR_BYTES,
    MAX_TENSORS,
    PROTOCOL_VERSION,
    Opaque,
    ProtocolError,
    clean_text,
)

TYPE_CHECKING = False   # typing.TYPE_CHECKING, without importing typing here (as in worker.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    Describe = Callable[[torch.Tensor], Mapping[str, object]]

__all__ = [
    # this module's own
    "encode_frame", "pack", "tensor_spec", "write_all",
    # re-exported from held.py
    "Held",
    # re-exported from wire_decode.py
    "INT_LIMIT", "FrameParser", "build_tensor", "check_device_tag", "header_length", "is_meta_spec",
    "loads_header", "parse_header", "read_frame_blocking", "unpack",
    # re-exported from wire_limits.py
    "DTYPE_NAMES", "DTYPES", "FRAME_LENGTH", "ITEMSIZE", "MAX_DEPTH", "MAX_DIMS", "MAX_FRAME_TENSOR_BYTES",
    "MAX_HEADER_BYTES", "MAX_PARAM_NAME", "MAX_STRING", "MAX_TENSOR_BYTES", "MAX_TENSORS", "PROTOCOL_VERSION", "Opaque",
    "ProtocolError", "clean_text",
]


def tensor_spec(t: torch.Tensor) -> tuple[dict[str, object], bytes]:
    """Describe a tensor for the header and return its C-contiguous CPU bytes."""
    name = DTYPE_NAMES.get(t.dtype)
    if name is None:
        raise TypeError(f"dtype {t.dtype} cannot be sent")
    # A learner's subclass may override __torch_function__: strip it before touching the data.
    with torch._C.DisableTorchFunctionSubclass():
        plain = torch.Tensor.detach(t)
        if type(plain) is not torch.Tensor:
            plain = plain.as_subclass(torch.Tensor)
        if plain.is_meta:                      # shape and dtype only: a meta tensor holds no data
            return {"dtype": name, "shape": list(plain.shape), "nbytes": 0, "device": "meta"}, b""
        plain = plain.to("cpu").contiguous()
        raw = plain.reshape(-1).view(torch.uint8).numpy().tobytes() if plain.numel() else b""
    return {"dtype": name, "shape": list(plain.shape), "nbytes": len(raw)}, raw


def encode_frame(header: Mapping[str, object], tensors: list[torch.Tensor] | tuple[()] = ()) -> bytes:
    """Build one frame: the header gets a "tensors" list describing ``tensors``."""
    specs, blobs = [], []
    for t in tensors:
        spec, raw = tensor_spec(t)
        specs.append(spec)
        blobs.append(raw)
    header = dict(header, tensors=specs)
    head = json.dumps(header, separators=(",", ":"), allow_nan=False).encode()
    if len(head) > MAX_HEADER_BYTES:
        raise ValueError(f"header of {len(head)} bytes is over the {MAX_HEADER_BYTES} cap")
    return b"".join([FRAME_LENGTH.pack(len(head)), head, *blobs])


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def pack(value: object, tensors: list[torch.Tensor] | None = None, *,
         describe: Describe | None = None, dicts: bool = False,
         helds: list[Held] | None = None) -> tuple[object, list[torch.Tensor]]:
    """Turn a Python value into a JSON tree, appending its tensors to ``tensors``.

    ``describe(t)`` may return extra advisory fields to store beside a tensor reference
    (the worker reports each returned tensor's device, Python type and autograd state).
    ``dicts``: send a dict with string keys as a dict (the harness's requests); otherwise, as in
    every reply, a dict is described by its type only.
    ``helds``: in a request, each :class:`Held` becomes ``{"$held": key}`` and is appended here (the
    harness makes sure the worker holds it before the request goes); otherwise it is an object.
    """
    if tensors is None:
        tensors = []
    return _pack(value, tensors, describe, 0, dicts, helds), tensors


def _pack(value: object, tensors: list[torch.Tensor], describe: Describe | None, depth: int,
          dicts: bool = False, helds: list[Held] | None = None) -> object:
    if depth > MAX_DEPTH:
        return {"$object": "nested too deeply"}
    if isinstance(value, torch.Tensor):
        if value.dtype not in DTYPE_NAMES or value.is_sparse or value.is_quantized:
            return {"$object": f"torch.Tensor of {value.dtype} ({value.layout})"}
        ref: dict[str, object] = {"$tensor": len(tensors)}
        if describe is not None:
            ref.update(describe(value))
        tensors.append(value)
        return ref
    if value is None or type(value) is bool:
        return value
    if type(value) is str:
        return value[:MAX_STRING]
    if type(value) is int:
        return value if abs(value) < 2**63 else {"$object": "int out of range"}
    if type(value) is float:
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, torch.device):
        return {"$device": str(value)}
    if type(value) is tuple or type(value) is list:
        key = "$tuple" if type(value) is tuple else "$list"
        if len(value) > MAX_TENSORS:
            return {"$object": f"{type(value).__name__} of length {len(value)}"}
        return {key: [_pack(v, tensors, describe, depth + 1, dicts, helds) for v in value]}
    if dicts and type(value) is dict and len(value) <= MAX_TENSORS and all(
            type(k) is str and len(k) <= MAX_PARAM_NAME for k in value):
        return {"$dict": {k: _pack(v, tensors, describe, depth + 1, dicts, helds) for k, v in value.items()}}
    if helds is not None and type(value) is Held:
        helds.append(value)
        return {"$held": value.key}
    cls = type(value)
    return {"$object": f"{cls.__module__}.{cls.__qualname__}"[:200]}

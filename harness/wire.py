"""The pipe format between the trusted harness and the untrusted worker.

A frame is a 4-byte big-endian header length, a UTF-8 JSON header of that length, then the raw
bytes of every tensor the header lists, in order. Values (arguments, return values, gradients)
travel as a small JSON tree in which tensors are references into that list:

    {"$tensor": 0}               a tensor (its dtype, shape and byte count are in header["tensors"])
    {"$tuple": [...]}            a tuple          {"$list": [...]}  a list
    {"$float": "nan"}            a non-finite float
    {"$device": "cuda:0"}        a torch.device (requests only)
    {"$object": "builtins.dict"} anything else a worker returned, described by its type only

This module is shared verbatim by both sides, so it imports only the standard library and torch.
Nothing here ever unpickles or evaluates what it reads: the receiving side accepts only
allow-listed dtypes, checks that each byte count matches its shape, caps every size before reading,
and rebuilds brand-new plain ``torch.Tensor`` objects.
"""

from __future__ import annotations

import json
import math
import os
import struct

import torch

PROTOCOL_VERSION = 1
# The kernels behind F.scaled_dot_product_attention, reachable through torch.ops.aten: forbidding
# SDPA forbids them too (in the worker's call record and in the harness's source scan).
SDPA_KERNELS = ("_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention",
                "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
                "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_fused_attention_overrideable")

MAX_HEADER_BYTES = 256 * 1024
MAX_TENSOR_BYTES = 64 * 1024 * 1024
MAX_FRAME_TENSOR_BYTES = 256 * 1024 * 1024
MAX_TENSORS = 64
MAX_DIMS = 8
MAX_DEPTH = 12
MAX_STRING = 4096

# Allow-list: names on the wire -> dtypes. Never getattr(torch, name) on a received string.
DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}
DTYPE_NAMES: dict[torch.dtype, str] = {v: k for k, v in DTYPES.items()}

_LENGTH = struct.Struct(">I")


class ProtocolError(Exception):
    """The other side sent something that is not a valid frame."""


# ---------------------------------------------------------------------------------------------
# Writing


def tensor_spec(t: torch.Tensor) -> tuple[dict, bytes]:
    """Describe a tensor for the header and return its C-contiguous CPU bytes."""
    name = DTYPE_NAMES.get(t.dtype)
    if name is None:
        raise TypeError(f"dtype {t.dtype} cannot be sent")
    # A learner's subclass may override __torch_function__: strip it before touching the data.
    with torch._C.DisableTorchFunctionSubclass():
        plain = torch.Tensor.detach(t)
        if type(plain) is not torch.Tensor:
            plain = plain.as_subclass(torch.Tensor)
        plain = plain.to("cpu").contiguous()
        raw = plain.reshape(-1).view(torch.uint8).numpy().tobytes() if plain.numel() else b""
    return {"dtype": name, "shape": list(plain.shape), "nbytes": len(raw)}, raw


def encode_frame(header: dict, tensors: list[torch.Tensor] = ()) -> bytes:
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
    return b"".join([_LENGTH.pack(len(head)), head, *blobs])


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def pack(value, tensors: list[torch.Tensor] | None = None, *, describe=None):
    """Turn a Python value into a JSON tree, appending its tensors to ``tensors``.

    ``describe(t)`` may return extra advisory fields to store beside a tensor reference
    (the worker reports each returned tensor's device, Python type and autograd state).
    """
    if tensors is None:
        tensors = []
    return _pack(value, tensors, describe, 0), tensors


def _pack(value, tensors, describe, depth):
    if depth > MAX_DEPTH:
        return {"$object": "nested too deeply"}
    if isinstance(value, torch.Tensor):
        if value.dtype not in DTYPE_NAMES or value.is_sparse or value.is_quantized:
            return {"$object": f"torch.Tensor of {value.dtype} ({value.layout})"}
        ref = {"$tensor": len(tensors)}
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
    if type(value) in (tuple, list):
        key = "$tuple" if type(value) is tuple else "$list"
        if len(value) > MAX_TENSORS:
            return {"$object": f"{type(value).__name__} of length {len(value)}"}
        return {key: [_pack(v, tensors, describe, depth + 1) for v in value]}
    cls = type(value)
    return {"$object": f"{cls.__module__}.{cls.__qualname__}"[:200]}


# ---------------------------------------------------------------------------------------------
# Reading and validating


def header_length(prefix: bytes) -> int:
    (n,) = _LENGTH.unpack(prefix)
    if n == 0 or n > MAX_HEADER_BYTES:
        raise ProtocolError(f"header length {n} is outside 1..{MAX_HEADER_BYTES}")
    return n


def parse_header(raw: bytes) -> tuple[dict, list[tuple[torch.dtype, tuple[int, ...], int]]]:
    """Parse and validate a header; return it with the checked (dtype, shape, nbytes) specs."""
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ProtocolError(f"header is not JSON: {type(exc).__name__}") from None
    if not isinstance(header, dict):
        raise ProtocolError("header is not a JSON object")
    specs = header.get("tensors", [])
    if not isinstance(specs, list) or len(specs) > MAX_TENSORS:
        raise ProtocolError("header 'tensors' must be a list of at most 64 entries")
    checked, total = [], 0
    for spec in specs:
        checked.append(_check_spec(spec))
        total += checked[-1][2]
    if total > MAX_FRAME_TENSOR_BYTES:
        raise ProtocolError(f"frame announces {total} tensor bytes, over the cap")
    return header, checked


def _check_spec(spec) -> tuple[torch.dtype, tuple[int, ...], int]:
    if not isinstance(spec, dict):
        raise ProtocolError("tensor spec is not an object")
    name, shape, nbytes = spec.get("dtype"), spec.get("shape"), spec.get("nbytes")
    if not isinstance(name, str) or name not in DTYPES:
        raise ProtocolError(f"dtype {str(name)[:40]!r} is not allowed")
    dtype = DTYPES[name]
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_DIMS
        or not all(type(d) is int and 0 <= d < 2**40 for d in shape)
    ):
        raise ProtocolError("tensor shape must be a list of at most 8 non-negative ints")
    expected = math.prod(shape) * _itemsize(dtype)
    if type(nbytes) is not int or nbytes != expected:
        raise ProtocolError(f"tensor byte count {nbytes!r} does not match shape {shape} of {name}")
    if nbytes > MAX_TENSOR_BYTES:
        raise ProtocolError(f"tensor of {nbytes} bytes is over the {MAX_TENSOR_BYTES} cap")
    return dtype, tuple(shape), nbytes


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def build_tensor(dtype: torch.dtype, shape: tuple[int, ...], raw: bytes) -> torch.Tensor:
    """A brand-new plain CPU tensor from validated bytes (bool bytes must be 0 or 1)."""
    if not raw:
        return torch.empty(shape, dtype=dtype)
    if dtype is torch.bool:
        as_bytes = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        if bool((as_bytes > 1).any()):
            raise ProtocolError("bool tensor holds bytes other than 0 and 1")
        return as_bytes.ne(0).reshape(shape)
    return torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape).clone()


def unpack(tree, tensors: list[torch.Tensor], *, on_tensor=None, depth: int = 0):
    """Rebuild a value from a JSON tree; every tensor reference must be in range.

    ``on_tensor(t, ref)`` may wrap or annotate each tensor with the advisory fields of its ref.
    """
    if depth > MAX_DEPTH:
        raise ProtocolError("value nested too deeply")
    if tree is None or isinstance(tree, (bool, int, float)):
        return tree
    if isinstance(tree, str):
        return tree[:MAX_STRING]
    if isinstance(tree, dict) and len(tree) >= 1:
        if "$tensor" in tree:
            i = tree["$tensor"]
            if type(i) is not int or not 0 <= i < len(tensors):
                raise ProtocolError("tensor reference out of range")
            return on_tensor(tensors[i], tree) if on_tensor else tensors[i]
        for key, kind in (("$tuple", tuple), ("$list", list)):
            if key in tree:
                items = tree[key]
                if not isinstance(items, list):
                    raise ProtocolError(f"{key} is not a list")
                return kind(unpack(v, tensors, on_tensor=on_tensor, depth=depth + 1) for v in items)
        if "$float" in tree:
            text = tree["$float"]
            if text not in ("nan", "inf", "-inf"):
                raise ProtocolError("bad $float")
            return float(text)
        if "$device" in tree and isinstance(tree["$device"], str):
            return torch.device(tree["$device"])
        if "$object" in tree:
            return Opaque(str(tree["$object"])[:200])
    raise ProtocolError("value is not a valid tree")


class FrameParser:
    """Incremental reader: feed it bytes as they arrive, take complete frames out.

    Sizes are validated as soon as the header is known, before any tensor bytes are buffered,
    so a hostile length can never make the reader allocate more than the caps allow.
    """

    def __init__(self):
        self._buf = bytearray()
        self._need_header: int | None = None
        self._pending: tuple[dict, list] | None = None

    def feed(self, data: bytes) -> None:
        self._buf += data

    def next_frame(self) -> tuple[dict, list[torch.Tensor]] | None:
        """Return (header, tensors) when a whole frame is buffered, else None."""
        if self._pending is None:
            if self._need_header is None:
                if len(self._buf) < 4:
                    return None
                self._need_header = header_length(bytes(self._buf[:4]))
                del self._buf[:4]
            if len(self._buf) < self._need_header:
                return None
            raw = bytes(self._buf[: self._need_header])
            del self._buf[: self._need_header]
            self._need_header = None
            self._pending = parse_header(raw)
        header, specs = self._pending
        body = sum(n for _, _, n in specs)
        if len(self._buf) < body:
            return None
        tensors, offset = [], 0
        for dtype, shape, n in specs:
            tensors.append(build_tensor(dtype, shape, bytes(self._buf[offset : offset + n])))
            offset += n
        del self._buf[:body]
        self._pending = None
        return header, tensors

    @property
    def buffered(self) -> int:
        return len(self._buf)


def read_frame_blocking(fd: int, parser: FrameParser) -> tuple[dict, list[torch.Tensor]]:
    """Block until one whole frame has arrived on ``fd`` (the worker's side of the pipe)."""
    while True:
        frame = parser.next_frame()
        if frame is not None:
            return frame
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            raise EOFError("the other side closed the pipe")
        parser.feed(chunk)


class Opaque:
    """A value the worker could not send (a dict, a NumPy array, ...), known only by its type."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<{self.type_name}>"

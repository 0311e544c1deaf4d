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
Nothing here ever unpickles or evaluates what it reads: the receiving side accepts only strict
JSON (no NaN, 64-bit ints, bounded nesting), allow-listed dtypes and bounded shapes (strides
included), checks that each byte count matches its shape, caps every size before reading, treats
device tags as claims to check, and rebuilds brand-new plain ``torch.Tensor`` objects on the CPU.
A tensor on the ``meta`` device (shape and dtype, no data: how a CPU-only machine checks that code
honours a device argument) travels as a spec with ``"device": "meta"`` and no bytes, and is rebuilt
on ``meta``: a spec that says meta can carry no data, so it cannot pass for a real tensor.
Every failure to decode raises ``ProtocolError`` and nothing else (see "Reading and validating").
"""

from __future__ import annotations

import json
import math
import os
import re
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
        if plain.is_meta:                      # shape and dtype only: a meta tensor holds no data
            return {"dtype": name, "shape": list(plain.shape), "nbytes": 0, "device": "meta"}, b""
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
#
# This is the one validation boundary for what the other side sends: every function below either
# returns plain, checked values or raises ProtocolError, whatever the bytes. The harness also
# turns any other exception raised while decoding a reply into a protocol error charged to the
# submission (src/lumen_ex/harness/client.py), so a gap here can never become an error of the grader.

INT_LIMIT = 2**63                 # ints on the wire are 64-bit, as pack() sends them
MAX_PARAMS = 256                  # parameters of one function in the load reply's table
MAX_FRAMES = 16                   # traceback entries of one learner error
PARAM_KINDS = frozenset({"POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD", "VAR_POSITIONAL", "KEYWORD_ONLY",
                         "VAR_KEYWORD"})
# A device as the worker may name it: the CPU, or a CUDA device with a plausible index.
_DEVICE_TAG = re.compile(r"cpu|meta|cuda(:[0-9]|:1[0-5])?")
ITEMSIZE: dict[str, int] = {name: torch.empty((), dtype=dt).element_size() for name, dt in DTYPES.items()}


def clean_text(value: str, limit: int = MAX_STRING) -> str:
    """``value`` cut to ``limit`` characters, with anything UTF-8 cannot encode (a lone surrogate
    from ``"\\ud800"`` in the JSON) replaced, so no writer of it can fail later."""
    return value[:limit].encode("utf-8", "replace").decode("utf-8")


def header_length(prefix: bytes) -> int:
    """The header length announced by a frame's 4-byte prefix, checked against the cap."""
    if len(prefix) != _LENGTH.size:
        raise ProtocolError("a frame's length prefix is not 4 bytes")
    (n,) = _LENGTH.unpack(prefix)
    if n == 0 or n > MAX_HEADER_BYTES:
        raise ProtocolError(f"header length {n} is outside 1..{MAX_HEADER_BYTES}")
    return n


def _reject_constant(name: str):
    raise ProtocolError(f"header holds {name}, which is not JSON")


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > 19:
        raise ProtocolError("header holds an integer outside the 64-bit range")
    value = int(text)
    if not -INT_LIMIT <= value < INT_LIMIT:
        raise ProtocolError("header holds an integer outside the 64-bit range")
    return value


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ProtocolError("header holds a number too large for a float")
    return value


def loads_header(raw: bytes) -> dict:
    """Strict JSON: an object, no NaN or Infinity, ints within 64 bits, bounded nesting."""
    try:
        header = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant, parse_int=_parse_int,
                            parse_float=_parse_float)
    except ProtocolError:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError, MemoryError) as exc:
        raise ProtocolError(f"header is not JSON: {type(exc).__name__}") from None
    if not isinstance(header, dict):
        raise ProtocolError("header is not a JSON object")
    return header


def parse_header(raw: bytes) -> tuple[dict, list[tuple[torch.dtype, tuple[int, ...], int]]]:
    """Parse and validate a header; return it with the checked (dtype, shape, nbytes) specs."""
    header = loads_header(raw)
    specs = header.get("tensors", [])
    if not isinstance(specs, list) or len(specs) > MAX_TENSORS:
        raise ProtocolError("header 'tensors' must be a list of at most 64 entries")
    checked = [_check_spec(spec) for spec in specs]
    total = sum(n for _, _, n in checked)
    if total > MAX_FRAME_TENSOR_BYTES:
        raise ProtocolError(f"frame announces {total} tensor bytes, over the cap")
    return header, checked


def _check_spec(spec) -> tuple[torch.dtype, tuple[int, ...], int]:
    """One tensor's (dtype, shape, nbytes): an allow-listed dtype, a bounded shape, exact bytes."""
    if not isinstance(spec, dict):
        raise ProtocolError("tensor spec is not an object")
    name, shape, nbytes = spec.get("dtype"), spec.get("shape"), spec.get("nbytes")
    if type(name) is not str or name not in DTYPES:
        raise ProtocolError(f"dtype {clean_text(str(name), 40)!r} is not allowed")
    if (not isinstance(shape, list) or len(shape) > MAX_DIMS
            or not all(type(d) is int and d >= 0 for d in shape)):
        raise ProtocolError("tensor shape must be a list of at most 8 non-negative ints")
    # Every stride must fit as well as the data: (0, 2**40, 2**40) holds no bytes at all, and
    # still overflows torch's stride arithmetic. So zero dims count as one here.
    if math.prod(max(d, 1) for d in shape) * ITEMSIZE[name] > MAX_TENSOR_BYTES:
        raise ProtocolError(f"tensor shape {shape[:MAX_DIMS]} of {name} is over the {MAX_TENSOR_BYTES}-byte cap")
    expected = 0 if is_meta_spec(spec) else math.prod(shape) * ITEMSIZE[name]
    if type(nbytes) is not int or nbytes != expected:
        raise ProtocolError(f"tensor byte count {nbytes!r:.40} does not match shape {shape} of {name}")
    return DTYPES[name], tuple(shape), nbytes


def is_meta_spec(spec) -> bool:
    """Whether a (checked) tensor spec announces a meta tensor: shape and dtype, no bytes."""
    return isinstance(spec, dict) and spec.get("device") == "meta"


def _itemsize(dtype: torch.dtype) -> int:
    return ITEMSIZE[DTYPE_NAMES[dtype]]


def build_tensor(dtype: torch.dtype, shape: tuple[int, ...], raw: bytes) -> torch.Tensor:
    """A brand-new plain CPU tensor from validated bytes (bool bytes must be 0 or 1)."""
    if len(raw) != math.prod(shape) * _itemsize(dtype):
        raise ProtocolError("tensor bytes do not match the shape")
    try:
        if not raw:
            return torch.empty(shape, dtype=dtype)
        if dtype is torch.bool:
            as_bytes = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
            if bool((as_bytes > 1).any()):
                raise ProtocolError("bool tensor holds bytes other than 0 and 1")
            return as_bytes.ne(0).reshape(shape)
        return torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape).clone()
    except ProtocolError:
        raise
    except Exception as exc:  # noqa: BLE001  torch refusing the shape is the sender's fault
        raise ProtocolError(f"tensor of shape {list(shape)} cannot be built: {type(exc).__name__}") from None


def check_device_tag(tag, allowed: frozenset[str] | None = None) -> str:
    """A device the worker names (advisory: the harness keeps every tensor it rebuilds on its own
    CPU). It must be ``cpu`` or ``cuda[:N]``, and, when ``allowed`` is given, of a type in it (the
    types the harness put the call on: a CPU run's sandbox has no GPU to put anything on)."""
    if type(tag) is not str or not _DEVICE_TAG.fullmatch(tag):
        raise ProtocolError(f"device tag {clean_text(str(tag), 40)!r} is not a device")
    if allowed is not None and tag.split(":")[0] not in allowed:
        raise ProtocolError(f"device tag {tag!r} names a device this call was not given")
    return tag


_MARKERS = ("$tensor", "$tuple", "$list", "$float", "$device", "$object")


def unpack(tree, tensors: list[torch.Tensor], *, on_tensor=None, devices: frozenset[str] | None = None,
           depth: int = 0):
    """Rebuild a value from a JSON tree; every tensor reference must be in range.

    ``on_tensor(t, ref)`` may wrap or annotate each tensor with the advisory fields of its ref
    (raising ProtocolError for a bad one). ``devices``: the device types a ``$device`` may name.
    """
    if depth > MAX_DEPTH:
        raise ProtocolError("value nested too deeply")
    if tree is None or type(tree) is bool:
        return tree
    if type(tree) is int:
        if not -INT_LIMIT <= tree < INT_LIMIT:
            raise ProtocolError("integer outside the 64-bit range")
        return tree
    if type(tree) is float:
        if not math.isfinite(tree):
            raise ProtocolError("non-finite float outside a $float")
        return tree
    if type(tree) is str:
        return clean_text(tree)
    if isinstance(tree, dict):
        keys = [k for k in _MARKERS if k in tree]
        if len(keys) == 1 and (keys[0] == "$tensor" or len(tree) == 1):
            return _unpack_marked(keys[0], tree, tensors, on_tensor, devices, depth)
    raise ProtocolError("value is not a valid tree")


def _unpack_marked(key: str, tree: dict, tensors, on_tensor, devices, depth: int):
    """One ``{"$kind": ...}`` node of a tree (see the module docstring)."""
    item = tree[key]
    if key == "$tensor":
        if type(item) is not int or not 0 <= item < len(tensors):
            raise ProtocolError("tensor reference out of range")
        return on_tensor(tensors[item], tree) if on_tensor else tensors[item]
    if key in ("$tuple", "$list"):
        if not isinstance(item, list) or len(item) > MAX_TENSORS:
            raise ProtocolError(f"{key} is not a list of at most {MAX_TENSORS} items")
        kind = tuple if key == "$tuple" else list
        return kind(unpack(v, tensors, on_tensor=on_tensor, devices=devices, depth=depth + 1) for v in item)
    if key == "$float":
        if type(item) is not str or item not in ("nan", "inf", "-inf"):
            raise ProtocolError("bad $float")
        return float(item)
    if key == "$device":
        return torch.device(check_device_tag(item, devices))
    if type(item) is not str:
        raise ProtocolError("$object does not name a type")
    return Opaque(clean_text(item, 200))


# -- reply headers (harness side) ---------------------------------------------------------------


def check_hello(header: dict) -> dict:
    """The worker's first frame: ``{"hello": true, "protocol": 1, "torch": "2.x", "cuda": bool}``."""
    if header.get("hello") is not True:
        raise ProtocolError("the first frame is not a hello")
    if type(header.get("protocol")) is not int or header["protocol"] != PROTOCOL_VERSION:
        raise ProtocolError("the hello names another protocol version")
    version, cuda = header.get("torch"), header.get("cuda")
    if type(version) is not str or type(cuda) is not bool:
        raise ProtocolError("the hello's torch version or cuda flag has the wrong type")
    return {"torch": clean_text(version, 40), "cuda": cuda}


def check_ok(header: dict) -> bool:
    """A reply's ``ok`` flag: exactly true or false."""
    ok = header.get("ok")
    if type(ok) is not bool:
        raise ProtocolError("the reply's 'ok' is not true or false")
    return ok


def check_elapsed(header: dict) -> float:
    """The worker's own timing of a call (advisory): a finite, non-negative number of seconds."""
    value = header.get("elapsed", 0.0)
    if type(value) not in (int, float) or not 0 <= value < 1e7:
        raise ProtocolError("the reply's 'elapsed' is not a number of seconds")
    return float(value)


def check_error(error) -> dict:
    """A learner's exception as the worker describes it: a claim, of which only text is kept."""
    if not isinstance(error, dict):
        raise ProtocolError("the reply's 'error' is not an object")
    kind, message, where = error.get("type"), error.get("message"), error.get("where", [])
    if type(kind) is not str or type(message) is not str:
        raise ProtocolError("the error's type or message is not a string")
    if not isinstance(where, list) or len(where) > MAX_FRAMES:
        raise ProtocolError("the error's traceback is not a short list")
    line = error.get("syntax_line")
    if line is not None and type(line) is not int:
        raise ProtocolError("the error's syntax line is not a number")
    return {"type": clean_text(kind, 100), "message": clean_text(message, 1000),
            "where": [_check_frame(f) for f in where], "syntax_line": line}


def _check_frame(frame) -> dict:
    if not isinstance(frame, dict):
        raise ProtocolError("a traceback entry is not an object")
    file, line, function, code = (frame.get(k) for k in ("file", "line", "function", "code"))
    if (type(file) is not str or type(function) is not str or (line is not None and type(line) is not int)
            or (code is not None and type(code) is not str)):
        raise ProtocolError("a traceback entry has fields of the wrong type")
    return {"file": clean_text(file, 200), "line": line, "function": clean_text(function, 200),
            "code": clean_text(code or "", 200)}


def check_functions(table, names: list[str]) -> dict[str, dict | None]:
    """The load reply's function table: exactly one entry per function asked for, each None (not
    defined) or ``{"callable": bool, "params": None | [{"name", "kind", "default"}, ...]}``."""
    if not isinstance(table, dict) or set(table) != set(names):
        raise ProtocolError("the function table does not list exactly the functions asked for")
    return {name: _check_function(table[name]) for name in names}


def _check_function(entry) -> dict | None:
    if entry is None:
        return None
    if not isinstance(entry, dict) or type(entry.get("callable")) is not bool:
        raise ProtocolError("a function table entry is not {callable: bool, params: ...}")
    params = entry.get("params")
    if params is None:
        return {"callable": entry["callable"], "params": None}
    if not isinstance(params, list) or len(params) > MAX_PARAMS:
        raise ProtocolError("a function's parameters are not a list")
    return {"callable": entry["callable"], "params": [_check_param(p) for p in params]}


def _check_param(param) -> dict:
    if not isinstance(param, dict):
        raise ProtocolError("a parameter is not an object")
    name, kind, default = param.get("name"), param.get("kind"), param.get("default")
    if type(name) is not str or kind not in PARAM_KINDS or (default is not None and type(default) is not str):
        raise ProtocolError("a parameter's name, kind or default has the wrong type")
    return {"name": clean_text(name, 200), "kind": kind,
            "default": None if default is None else clean_text(default, 200)}


class FrameParser:
    """Incremental reader: feed it bytes as they arrive, take complete frames out.

    Sizes are validated as soon as the header is known, before any tensor bytes are buffered,
    so a hostile length can never make the reader allocate more than the caps allow. After the
    first invalid frame the stream has no trustworthy frame boundary left: the parser stays
    broken (every later call raises), and its owner replaces the other side.
    """

    def __init__(self):
        self._buf = bytearray()
        self._need_header: int | None = None
        self._pending: tuple[dict, list] | None = None
        self.broken: str | None = None

    def feed(self, data: bytes) -> None:
        if self.broken is None:
            self._buf += data

    def next_frame(self) -> tuple[dict, list[torch.Tensor]] | None:
        """Return (header, tensors) when a whole frame is buffered, else None; ProtocolError, and
        nothing else, for an invalid one."""
        if self.broken is not None:
            raise ProtocolError(f"the stream is broken ({self.broken})")
        try:
            return self._next_frame()
        except Exception as exc:  # noqa: BLE001  whatever failed, the frame came from the other side
            detail = str(exc) if isinstance(exc, ProtocolError) else f"{type(exc).__name__} while decoding"
            self.broken = detail
            self._buf, self._pending, self._need_header = bytearray(), None, None
            raise ProtocolError(detail) from None

    def _next_frame(self) -> tuple[dict, list[torch.Tensor]] | None:
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
        for spec, (dtype, shape, n) in zip(header.get("tensors") or [], specs):
            if is_meta_spec(spec):             # validated as holding no bytes (_check_spec)
                tensors.append(torch.empty(shape, dtype=dtype, device="meta"))
                continue
            tensors.append(build_tensor(dtype, shape, bytes(self._buf[offset : offset + n])))
            offset += n
        del self._buf[:body]
        self._pending = None
        return header, tensors

    @property
    def buffered(self) -> int:
        return len(self._buf)

    @property
    def partial(self) -> bool:
        """Whether part of a frame has arrived and the rest has not."""
        return bool(self._buf) or self._need_header is not None or self._pending is not None


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

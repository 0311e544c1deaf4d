"""Reading and validating what the other side sends: frames, tensor specs and value trees.

Part of ``wire`` (see its docstring for the format). This is the one validation boundary for what
the other side sends: every function here either returns plain, checked values or raises
ProtocolError, whatever the bytes. The harness also turns any other exception raised while decoding
a reply into a protocol error charged to the submission (src/lumen_ex/harness/client.py), so a gap
here can never become an error of the grader.

Like every file of this folder it runs inside the sandbox too (worker.py imports the folder as a
package), so it imports only the standard library, torch and its siblings.
"""

from __future__ import annotations

import json
import math
import os
import re

import torch

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
    MAX_TENSOR_BYTES,
    MAX_TENSORS,
    Opaque,
    ProtocolError,
    clean_text,
)

TYPE_CHECKING = False   # typing.TYPE_CHECKING, without importing typing here (as in worker.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, NoReturn

    Spec = tuple[torch.dtype, tuple[int, ...], int]        # a checked tensor spec: dtype, shape, nbytes
    OnTensor = Callable[[torch.Tensor, dict[str, Any]], object]

INT_LIMIT = 2**63                 # ints on the wire are 64-bit, as pack() sends them
# A device as the worker may name it: the CPU, or a CUDA device with a plausible index.
_DEVICE_TAG = re.compile(r"cpu|meta|cuda(:[0-9]|:1[0-5])?")


def header_length(prefix: bytes) -> int:
    """The header length announced by a frame's 4-byte prefix, checked against the cap."""
    if len(prefix) != FRAME_LENGTH.size:
        raise ProtocolError("a frame's length prefix is not 4 bytes")
    n: int = FRAME_LENGTH.unpack(prefix)[0]
    if n == 0 or n > MAX_HEADER_BYTES:
        raise ProtocolError(f"header length {n} is outside 1..{MAX_HEADER_BYTES}")
    return n


def _reject_constant(name: str) -> NoReturn:
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


def loads_header(raw: bytes) -> dict[str, Any]:
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


def parse_header(raw: bytes) -> tuple[dict[str, Any], list[Spec]]:
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


def _check_spec(spec: object) -> Spec:
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


def is_meta_spec(spec: object) -> bool:
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


def check_device_tag(tag: object, allowed: frozenset[str] | None = None) -> str:
    """A device the worker names (advisory: the harness keeps every tensor it rebuilds on its own
    CPU). It must be ``cpu`` or ``cuda[:N]``, and, when ``allowed`` is given, of a type in it (the
    types the harness put the call on: a CPU run's sandbox has no GPU to put anything on)."""
    if type(tag) is not str or not _DEVICE_TAG.fullmatch(tag):
        raise ProtocolError(f"device tag {clean_text(str(tag), 40)!r} is not a device")
    if allowed is not None and tag.split(":")[0] not in allowed:
        raise ProtocolError(f"device tag {tag!r} names a device this call was not given")
    return tag


_MARKERS = ("$tensor", "$tuple", "$list", "$float", "$device", "$object", "$dict", "$held")


def unpack(tree: object, tensors: list[torch.Tensor], *, on_tensor: OnTensor | None = None,
           devices: frozenset[str] | None = None, depth: int = 0, dicts: bool = False,
           held: Callable[[str], Any] | None = None) -> Any:
    """Rebuild a value from a JSON tree; every tensor reference must be in range.

    ``on_tensor(t, ref)`` may wrap or annotate each tensor with the advisory fields of its ref
    (raising ProtocolError for a bad one). ``devices``: the device types a ``$device`` may name.
    ``dicts``: accept ``$dict`` (the worker reading the harness's request); a reply never has one.
    ``held(key)``: the value of a ``$held`` (the worker's copy of what it was sent once, held.py);
    without it, as in every reply, a ``$held`` is a ProtocolError.
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
            return _unpack_marked(keys[0], tree, tensors, on_tensor, devices, depth, dicts, held)
    raise ProtocolError("value is not a valid tree")


def _unpack_marked(key: str, tree: dict[str, Any], tensors: list[torch.Tensor], on_tensor: OnTensor | None,
                   devices: frozenset[str] | None, depth: int, dicts: bool,
                   held: Callable[[str], Any] | None = None) -> Any:
    """One ``{"$kind": ...}`` node of a tree (see wire's docstring)."""
    item = tree[key]
    if key == "$held":
        if held is None or type(item) is not str:
            raise ProtocolError("only a request can name a held value")
        return held(item)
    if key == "$tensor":
        if type(item) is not int or not 0 <= item < len(tensors):
            raise ProtocolError("tensor reference out of range")
        return on_tensor(tensors[item], tree) if on_tensor else tensors[item]
    if key in ("$tuple", "$list"):
        if not isinstance(item, list) or len(item) > MAX_TENSORS:
            raise ProtocolError(f"{key} is not a list of at most {MAX_TENSORS} items")
        kind = tuple if key == "$tuple" else list
        return kind(unpack(v, tensors, on_tensor=on_tensor, devices=devices, depth=depth + 1, dicts=dicts,
                           held=held) for v in item)
    if key == "$dict":
        if not dicts:
            raise ProtocolError("a reply cannot carry a $dict")
        if not isinstance(item, dict) or len(item) > MAX_TENSORS or any(len(k) > MAX_PARAM_NAME for k in item):
            raise ProtocolError(f"$dict is not a mapping of at most {MAX_TENSORS} short names")
        return {clean_text(k, MAX_PARAM_NAME): unpack(v, tensors, on_tensor=on_tensor, devices=devices,
                                                      depth=depth + 1, dicts=dicts, held=held)
                for k, v in item.items()}
    if key == "$float":
        if type(item) is not str or item not in ("nan", "inf", "-inf"):
            raise ProtocolError("bad $float")
        return float(item)
    if key == "$device":
        return torch.device(check_device_tag(item, devices))
    if type(item) is not str:
        raise ProtocolError("$object does not name a type")
    return Opaque(clean_text(item, 200))


class FrameParser:
    """Incremental reader: feed it bytes as they arrive, take complete frames out.

    Sizes are validated as soon as the header is known, before any tensor bytes are buffered,
    so a hostile length can never make the reader allocate more than the caps allow. After the
    first invalid frame the stream has no trustworthy frame boundary left: the parser stays
    broken (every later call raises), and its owner replaces the other side.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._need_header: int | None = None
        self._pending: tuple[dict[str, Any], list[Spec]] | None = None
        self.broken: str | None = None

    def feed(self, data: bytes) -> None:
        if self.broken is None:
            self._buf += data

    def next_frame(self) -> tuple[dict[str, Any], list[torch.Tensor]] | None:
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

    def _next_frame(self) -> tuple[dict[str, Any], list[torch.Tensor]] | None:
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
        tensors: list[torch.Tensor] = []
        offset = 0
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


def read_frame_blocking(fd: int, parser: FrameParser) -> tuple[dict[str, Any], list[torch.Tensor]]:
    """Block until one whole frame has arrived on ``fd`` (the worker's side of the pipe)."""
    while True:
        frame = parser.next_frame()
        if frame is not None:
            return frame
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            raise EOFError("the other side closed the pipe")
        parser.feed(chunk)

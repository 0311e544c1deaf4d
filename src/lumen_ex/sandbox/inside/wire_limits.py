"""The fixed terms of the wire format that both sides hold to: the protocol version, the caps on
every size, the allow-list of dtypes, and the types every part of the format shares.

Part of ``wire`` (see its docstring): like every file of this folder it runs inside the sandbox too
(worker.py imports the folder as a package), so it imports only the standard library and torch.
"""

from __future__ import annotations

import struct

import torch

PROTOCOL_VERSION = 1
MAX_HEADER_BYTES = 256 * 1024
MAX_TENSOR_BYTES = 64 * 1024 * 1024
MAX_FRAME_TENSOR_BYTES = 256 * 1024 * 1024
MAX_TENSORS = 64
MAX_DIMS = 8
MAX_DEPTH = 12
MAX_STRING = 4096
MAX_PARAM_NAME = 200            # a module parameter's name, as a call with "module" describes it

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
ITEMSIZE: dict[str, int] = {name: torch.empty((), dtype=dt).element_size() for name, dt in DTYPES.items()}

# A frame starts with its header's length: 4 bytes, big-endian.
FRAME_LENGTH = struct.Struct(">I")


class ProtocolError(Exception):
    """The other side sent something that is not a valid frame."""


class Opaque:
    """A value the worker could not send (a dict, a NumPy array, ...), known only by its type."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<{self.type_name}>"


def clean_text(value: str, limit: int = MAX_STRING) -> str:
    """``value`` cut to ``limit`` characters, with anything UTF-8 cannot encode (a lone surrogate
    from ``"\\ud800"`` in the JSON) replaced, so no writer of it can fail later."""
    return value[:limit].encode("utf-8", "replace").decode("utf-8")

"""The model's file and its text: data/tiny_model.safetensors (the weights, with the config, the
vocabulary and the prompts in its metadata) and data/training_text.txt, for the suite and for
tools/train_tiny_model.py, which writes them. The reference (reference.py) is only the model.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import torch

DATA = Path(__file__).resolve().parent.parent / "data"
WEIGHTS = DATA / "tiny_model.safetensors"
TEXT = DATA / "training_text.txt"
_DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64}
_NAMES = {v: k for k, v in _DTYPES.items()}


# The safetensors format: an 8-byte little-endian header length, a JSON header naming each tensor's
# dtype, shape and byte range, then the bytes. "__metadata__" holds strings (config, vocabulary).


def save_safetensors(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """Write ``tensors`` (contiguous, CPU) and string ``metadata`` as one safetensors file."""
    header: dict[str, object] = {"__metadata__": metadata}
    blobs, offset = [], 0
    for name, t in tensors.items():
        raw = t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)                     # the format pads the header to 8 bytes
    Path(path).write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def load_safetensors(path: Path = WEIGHTS) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Read a safetensors file: (tensors by name, metadata)."""
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {})
    body = memoryview(data)[8 + n:]
    tensors = {}
    for name, spec in header.items():
        start, end = spec["data_offsets"]
        flat = torch.frombuffer(bytearray(body[start:end]), dtype=_DTYPES[spec["dtype"]])
        tensors[name] = flat.reshape(spec["shape"]).clone()
    return tensors, metadata


def load_model(path: Path = WEIGHTS) -> tuple[dict[str, torch.Tensor], dict, str]:
    """The shipped model: (weights, config, vocabulary). Character ``vocab[i]`` is token ``i``."""
    weights, metadata = load_safetensors(path)
    config = json.loads(metadata["config"])
    return weights, config, metadata["vocab"]


def encode(text: str, vocab: str) -> torch.Tensor:
    """Characters -> token ids (int64)."""
    index = {c: i for i, c in enumerate(vocab)}
    return torch.tensor([index[c] for c in text], dtype=torch.int64)


def decode(tokens, vocab: str) -> str:
    """Token ids -> characters."""
    return "".join(vocab[int(t)] for t in tokens)

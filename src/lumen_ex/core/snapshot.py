"""The learner's file as it was when the check began: read once, hashed, graded everywhere.

A check runs several workers (one after every crash or timeout) and a harness-side source scan.
If each of them read the file from disk, a save in the middle of a check would grade a blend of
two versions. So the harness reads the file once, here, and every worker imports exactly these
bytes (sent over the pipe: src/lumen_ex/harness/client.py, src/lumen_ex/sandbox/inside/worker.py); the scan reads them too. The
sha256 goes into the result record (``source``) and the terminal header, so a result always
says which bytes it is about.

Reading is bounded: a regular file (never a FIFO or a device), at most ``MAX_BYTES``.
Other files of the exercise folder (helper modules a learner imports) are still read by the
worker when imported.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from lumen_ex.core import bounded

# A solution is a few kilobytes (the stub with its docstrings is 2). The source scan's bound too:
# src/lumen_ex/harness/source_scan.py MAX_SOURCE_BYTES is this constant.
MAX_BYTES = 256 * 1024


class SnapshotRefused(Exception):
    """The file cannot be graded as it is (missing, not a regular file, too large): the
    submission's problem, reported as a failed check with this message."""


@dataclass(frozen=True)
class Snapshot:
    name: str          # the file's name, e.g. attention.py
    data: bytes
    sha256: str

    def to_dict(self) -> dict[str, str | int]:
        return {"file": self.name, "sha256": self.sha256, "bytes": len(self.data)}


def take(path: Path, max_bytes: int = MAX_BYTES) -> Snapshot:
    """Read ``path`` once (at most ``max_bytes``) and hash it; :class:`SnapshotRefused` if not.
    A link the learner made to their own file is followed; what it ends at must be a regular
    file (src/lumen_ex/core/bounded.py)."""
    path = Path(path)
    try:
        data = bounded.read_regular(Path(os.path.realpath(path)), max_bytes, name=path.name)
    except bounded.TooLarge:
        raise SnapshotRefused(f"{path.name} is over {max_bytes // 1024} KiB: too large to check "
                              "(a solution is a few kilobytes)") from None
    except bounded.NotReadable as exc:
        raise SnapshotRefused(str(exc)) from None
    return Snapshot(path.name, data, hashlib.sha256(data).hexdigest())

"""The exercise file as the playground's editor sees it: read, saved, compared, restored.

The editor's text *is* the workspace file (so ``lumen-ex check`` in a terminal grades the same
code). Each read returns the file's sha256, the page's ``base``; a save names the base it edited,
and when the file on disk is no longer that (another editor saved it), the save is refused with
what is on disk now (:class:`Conflict`), for the learner to reload or to keep theirs knowingly
(a save with the new base). Nothing is ever overwritten silently.

Reads go through the snapshot's bounded read (src/lumen_ex/core/snapshot.py: a regular file, at most
256 KiB); saves are atomic (src/lumen_ex/core/atomic.py), at most the same size, and write the path
itself (a link there is replaced, never written through). Restoring the stub keeps the previous
text in ``.lumen-ex/backups/``. Every write first resolves its whole path under the workspace's real
root (:func:`inside`): a folder on the way that is a link (``01-attention`` or ``.lumen-ex/backups``
pointing elsewhere) refuses the write, so nothing is ever written outside the workspace.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lumen_ex.core import snapshot
from lumen_ex.core.atomic import write_atomically
from lumen_ex.core.errors import UsageError
from lumen_ex.core.workspace import STATE_DIR, Workspace

if TYPE_CHECKING:
    from lumen_ex.core.catalog import Exercise

MAX_TEXT_BYTES = snapshot.MAX_BYTES
MISSING = "missing"     # the digest of a file that is not there


@dataclass
class FileText:
    text: str
    digest: str

    def to_dict(self) -> dict:
        return {"text": self.text, "digest": self.digest}


class Conflict(Exception):
    """The file on disk is not the one the page edited."""

    def __init__(self, disk: FileText):
        super().__init__("the file changed on disk")
        self.disk = disk


def inside(root: Path, path: Path) -> Path:
    """``path``, once every folder between the workspace ``root`` and it is a real folder, not a
    link (so its real path lies under root's); else a one-line UsageError and nothing is written."""
    root_abs, path_abs = Path(os.path.abspath(root)), Path(os.path.abspath(path))
    try:
        rel = path_abs.relative_to(root_abs)
    except ValueError:
        raise UsageError(f"{path} is outside the workspace: the playground writes nothing there",
                         "Save files inside the workspace only") from None
    current = root_abs
    for part in rel.parts[:-1]:
        current = current / part
        if current.is_symlink():
            raise UsageError(f"{current.relative_to(root_abs)} is a link: the playground writes nothing through it "
                             "(it could lead outside the workspace)",
                             f"Make {current.relative_to(root_abs)} a plain folder again, then retry") from None
    return path_abs


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read(path: Path) -> FileText:
    """The file's text and digest; a missing file reads as empty with the digest ``missing``."""
    if not path.exists() and not path.is_symlink():
        return FileText("", MISSING)
    try:
        snap = snapshot.take(path)
    except snapshot.SnapshotRefused as exc:
        raise UsageError(f"the playground cannot open {path.name}: {exc}",
                         "Fix the file in another editor (or restore the stub), then reload the page") from None
    return FileText(snap.data.decode("utf-8", "replace"), snap.sha256)


def save(path: Path, text: str, base: str, *, root: Path) -> str:
    """Write ``text`` when the file on disk is still ``base``; its new digest. :class:`Conflict`
    when it is not. ``root``: the workspace, which the write must stay inside (:func:`inside`)."""
    path = inside(root, path)
    data = text.encode("utf-8", "surrogatepass")
    if len(data) > MAX_TEXT_BYTES:
        raise UsageError(f"the text is over {MAX_TEXT_BYTES // 1024} KiB: too large to save "
                         "(a solution is a few kilobytes)", "Remove what the exercise does not need")
    disk = read(path)
    if disk.digest != base:
        raise Conflict(disk)
    if disk.text != text:
        write_atomically(path, text)
    return digest(data)


def restore_stub(ws: Workspace, ex: Exercise, path: Path) -> FileText:
    """Put the exercise's stub back; the text it replaces goes to .lumen-ex/backups/ first."""
    path = inside(ws.root, path)
    stub = ex.stub_path.read_text(encoding="utf-8")
    try:
        old = read(path)
    except UsageError:
        old = None
    if old is not None and old.digest != MISSING and old.text != stub:
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
        write_atomically(inside(ws.root, ws.root / STATE_DIR / "backups" / f"{ex.dir}-{stamp}-{ex.file}"), old.text)
    write_atomically(path, stub)
    return FileText(stub, digest(stub.encode("utf-8")))

"""Which sandbox ``lumen-ex grade`` grades a class in, and the grader image it names.

The same ``select_backend`` as ``lumen-ex check`` (src/lumen_ex/sandbox/select.py) chooses it; batch
grading then refuses the unisolated mode unless ``--unsafe``. The choice travels to the grading
processes as the backend's ``spec()`` string (``bwrap``, ``none``, ``docker:<image>``).
"""

from __future__ import annotations

from lumen_ex.core.errors import UsageError
from lumen_ex.core.results import SandboxInfo, join_notes
from lumen_ex.image import engine
from lumen_ex.sandbox.select import select_backend


def choose_sandbox(name: str, unsafe: bool) -> tuple[str, SandboxInfo, str]:
    """The grading processes' SANDBOX argument, what it is, and a note; refuses unisolated without --unsafe."""
    launcher, note = select_backend(name)
    if not launcher.keeps_workers:    # docker: each check is a container run, its image named in the spec
        return launcher.spec(), SandboxInfo(launcher.name, True, {}, note), note
    if not launcher.isolated and not unsafe:
        why = ("--sandbox none runs every student's code with your permissions" if name == "none" else
               f"no sandbox is available here ({note.strip()})")
        raise UsageError(f"batch grading refuses the unisolated mode: {why}",
                         "Use --sandbox bwrap or --sandbox docker (see `lumen-ex doctor`), "
                         "or pass --unsafe if you trust every submission")
    info = SandboxInfo(launcher.name, launcher.isolated, {}, join_notes(launcher.note(), note))
    return launcher.name, info, note


def image_id(ref: str) -> str:
    """The id (sha256) of the grader image ``ref``, '' when docker cannot say: results graded under
    another image are regraded (src/lumen_ex/classroom/store.py)."""
    answer = engine.docker("image", "inspect", "--format", "{{.Id}}", ref, timeout=30)
    return answer.out.strip() if answer.ok else ""

"""The command line as the tests run it: the installed `lumen-ex` script, golden outputs, a workspace.

``run`` calls the installed command with a fixed width and no colour; ``normalise`` takes out what
varies between runs (temporary paths, durations); ``compare`` holds a text to its golden in
tests/golden/ (LUMEN_EX_UPDATE_GOLDEN=1 rewrites it, then read the diff).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import LUMEN_EX

from lumen_ex.core import catalog

GOLDEN = Path(__file__).parents[1] / "golden"
REFERENCE_1 = catalog.load(environ={}).find(1).reference_path
SYNTAX_ERROR = "def scaled_dot_product_attention(q, k, v, mask=None)\n    return q\n"


def run(args: list[str], cwd: Path, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FORCE_COLOR", "CLICOLOR"))}
    env.update({"COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb", **(env_extra or {})})
    return subprocess.run([LUMEN_EX, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def normalise(text: str, root: Path) -> str:
    text = text.replace(str(root), "<tmp>")
    text = re.sub(r"\d+\.\d+ s\b", "<t> s", text)
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def compare(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("LUMEN_EX_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden {path}: run with LUMEN_EX_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"output differs from {path} (LUMEN_EX_UPDATE_GOLDEN=1 rewrites it)"


@pytest.fixture
def workspace(tmp_path):
    """A workspace made by `lumen-ex init` (its root). tests/conftest.py registers this module as a
    plugin, so a test module that defines no ``workspace`` fixture of its own gets this one."""
    proc = run(["init", "ws"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    return tmp_path / "ws"


def put(ws: Path, source: str | Path, ex: str = "1") -> None:
    """Put ``source`` (a path or the code itself) in ``ws`` as exercise ``ex``'s file."""
    e = catalog.load().find(ex)
    target = ws / e.dir / e.file
    if isinstance(source, Path):
        shutil.copyfile(source, target)
    else:
        target.write_text(source)


def server_env(runtime: Path, **extra: str) -> dict[str, str]:
    """The environment of a `lumen-ex check` whose check server lives in the runtime folder ``runtime``
    (its sockets and logs in ``runtime/lumen-ex``): the server on, and not in CI, whatever the tests'."""
    from lumen_ex.learner import check_server

    return {"XDG_RUNTIME_DIR": str(runtime), check_server.SWITCH_ENV: "on", "CI": "", **extra}


def server_log(runtime: Path) -> str:
    """Every log of the check servers in ``runtime`` (src/lumen_ex/learner/warm_server.py ``log``)."""
    folder = runtime / "lumen-ex"
    return "".join(p.read_text() for p in sorted(folder.glob("*.log"))) if folder.is_dir() else ""


class WarmWorkspace:
    """One workspace, made by `lumen-ex init`, whose checks are answered by its own check server
    (src/lumen_ex/learner/check_server.py), as a learner's repeated `lumen-ex check` is: for the
    golden and format tests that check many files, each check after the first costs a connection
    and the hidden tests instead of two torch imports (about 0.3 against 2.7 busy core-seconds).

    The first check is cold and starts the server; :meth:`run` then waits until it serves, so that
    every later check is warm. What a warm check prints is what a cold one prints, record and output
    (tests/e2e/test_check_server.py shows it). The server lives in a runtime folder of this workspace's
    own; :meth:`close` stops it and says how many checks it answered, so that the tests can hold their
    checks to the warm path (:meth:`assert_warm`)."""

    def __init__(self, tmp: Path):
        import tempfile

        self.runtime = Path(tempfile.mkdtemp(prefix="lumen-ex-test-run-"))
        self.env = server_env(self.runtime)
        proc = run(["init", "ws"], tmp)
        assert proc.returncode == 0, proc.stderr
        self.root = tmp / "ws"
        self.stubs = {e.slug: (self.root / e.dir / e.file).read_text() for e in catalog.load().exercises}
        self.checks = 0

    def put(self, source: str | Path | None, ex: str = "1") -> None:
        """Put ``source`` in exercise ``ex``'s file; None puts back the stub `lumen-ex init` wrote."""
        put(self.root, self.stubs[catalog.load().find(ex).slug] if source is None else source, ex)

    def run(self, args: list[str], cwd: Path | None = None, env_extra: dict | None = None) -> subprocess.CompletedProcess:
        """The installed command in this workspace (``cwd``: a folder in it), with its server on."""
        proc = run(args, cwd or self.root, {**self.env, **(env_extra or {})})
        if args[:1] == ["check"]:
            self.checks += 1
            self._wait_serving()
        return proc

    def answered_warm(self) -> int:
        """How many checks the server answered (its log's ``checked`` lines)."""
        return len(re.findall(r"\] checked \S+ seed \d+: ", server_log(self.runtime)))

    def assert_warm(self) -> None:
        """Every check but the first was answered by the server: the tests ran the warm path."""
        assert self.answered_warm() >= self.checks - 1, (self.checks, server_log(self.runtime))

    def _wait_serving(self, timeout: float = 120) -> None:
        import time

        deadline = time.monotonic() + timeout
        while "] serving " not in server_log(self.runtime):
            assert time.monotonic() < deadline, f"the check server did not start:\n{server_log(self.runtime)}"
            time.sleep(0.05)

    def close(self) -> None:
        from lumen_ex.learner import check_server

        check_server.stop_all(self.runtime / "lumen-ex")
        shutil.rmtree(self.runtime, ignore_errors=True)


@pytest.fixture(scope="session")
def warm_workspace(tmp_path_factory):
    """One :class:`WarmWorkspace` for the session's golden, picture and format checks
    (tests/e2e/test_cli.py, test_cli_pictures.py, test_formats.py, test_failing_goldens.py), kept on one worker in order
    (tests/conftest.py SESSION_FIXTURES); at the end every check but the first must have been
    answered warm. Each test puts the file it checks first: no test reads another's."""
    ws = WarmWorkspace(tmp_path_factory.mktemp("warm"))
    try:
        yield ws
        ws.assert_warm()
    finally:
        ws.close()

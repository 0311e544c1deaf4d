"""Starting and stopping ``lumen-ex serve``.

:func:`serve` binds the socket itself (127.0.0.1 unless ``host`` says otherwise; port 0 picks a
free one; a busy default port moves on to the next few), prints the URL with its token, opens the
browser unless told not to, and runs uvicorn until Ctrl-C. On the way out the check thread ends and
the warm session is closed: no worker and no cgroup are left behind.
"""

from __future__ import annotations

import errno
import socket
import threading
import webbrowser
from pathlib import Path
from typing import Callable

from lumen_ex.core.errors import UsageError
from lumen_ex.core.workspace import Workspace

DEFAULT_PORT = 8420
PORT_TRIES = 10        # the default port and the next nine, when it is busy
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``; from ``port`` up when it is the default and busy."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    tries = PORT_TRIES if port == DEFAULT_PORT else 1
    last: OSError | None = None
    for candidate in range(port, port + tries):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, candidate))
        except OSError as exc:
            sock.close()
            last = exc
            if exc.errno != errno.EADDRINUSE:
                break
            continue
        sock.listen(64)
        sock.set_inheritable(False)
        return sock
    raise UsageError(f"cannot listen on {host}:{port}: {getattr(last, 'strerror', last)}",
                     "Choose another port with --port N (0: any free port)")


def url_of(host: str, port: int, token: str) -> str:
    """The link to print: bound to every address, this machine's own (loopback) address."""
    shown = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"http://{f'[{shown}]' if ':' in shown else shown}:{port}/#token={token}"


def serve(*, workspace: Path | None = None, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
          open_browser: bool = True, sandbox: str = "auto", seed: int | None = None, device: str = "auto",
          say: Callable[[str], None] = print) -> int:
    import uvicorn

    from lumen_ex.playground.app import bundle_built, create_app
    from lumen_ex.playground.checks import CheckService
    from lumen_ex.playground.security import new_token

    ws = Workspace.find(workspace)
    sock = bind(host, port)
    port = sock.getsockname()[1]
    token = new_token()
    service = CheckService(ws, sandbox=sandbox, seed=seed, device=device)
    try:
        app = create_app(service, token=token, port=port, host=host)
        url = url_of(host, port, token)
        if host not in LOOPBACK:
            say(f"warning: listening on {host}, not only on this machine: anyone who can reach it and has the "
                "token can run code here (sandboxed). Use the default (127.0.0.1) unless you mean it.")
        if not service.sandbox_info["isolated"]:
            say(f"warning: {service.sandbox_info['note'] or 'checks run NOT ISOLATED'}")
        if not bundle_built():
            say("warning: the page is not built (no Node.js when lumen-ex was installed): install Node.js 20 "
                "and npm, then run ./install.sh again")
        say(f"lumen-ex serve: workspace {ws.root}")
        say(f"open {url}   (Ctrl-C to stop)")
        if open_browser:
            threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=2)
        try:
            uvicorn.Server(config).run(sockets=[sock])
        except KeyboardInterrupt:   # uvicorn passes Ctrl-C on once it has shut down: the normal way out
            pass
    finally:
        service.close()
        sock.close()
    return 0

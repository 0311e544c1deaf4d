"""Who may use the playground's server, and the headers every answer carries.

The server runs the learner's code (in the sandbox) on request, so it must answer only the page
it served, in the learner's own browser tab:

- a **token** (random, 256 bits) is required on every API request (``/api/...``), in an
  ``Authorization: token ...`` header, compared in constant time. The command prints it in the
  link's fragment (``/#token=...``), which a browser never sends to any server; the page keeps it
  in ``sessionStorage`` (scoped to its origin: scheme, host **and port**, and to the tab) and sends
  it in that header on every request, the event stream included. Cookies are never read: a
  browser sends 127.0.0.1's cookies to every port of it and lets every port set them, so a page
  served from another local port could read or spoil a cookie credential, and cannot reach this one;
- the page (``/``) and its bundle (``/static/app.js``, ``app.css``) are the same for everyone and
  hold nothing of the workspace: they are served without the token, so that the page can load and
  read the fragment;
- the **Host** header must name this server (``127.0.0.1``, ``localhost`` or ``[::1]`` with its
  port, or the address given with ``--host``; any IP address when bound to all of them): a page
  on another site that rebinds its own name to 127.0.0.1 (DNS rebinding) is refused;
- a request that changes something (anything but GET and HEAD) also needs an ``Origin`` header
  naming this server, and a JSON body: another site's form or script cannot post to it. No GET
  starts work (src/lumen_ex/playground/app.py);
- no CORS headers are ever sent; every answer forbids framing and inline scripts
  (Content-Security-Policy) and is never cached.

:class:`Guard` is plain ASGI middleware, so streamed answers (server-sent events) pass through it
unchanged. tests/e2e/test_playground_http.py sends the requests it must refuse, and
tests/e2e/test_playground_browser.py has a page on another local port try to read or spoil the
credential. docs/security.md says what this does and does not protect on a shared machine.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets

SAFE_METHODS = ("GET", "HEAD")
PUBLIC_PATHS = ("/", "/static/app.js", "/static/app.css")    # the page and its bundle: nothing of the workspace
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def new_token() -> str:
    return secrets.token_urlsafe(32)


def csp(nonce: str) -> str:
    """No inline script anywhere; style sheets from the bundle, or with the page's nonce (the ones
    CodeMirror makes); style attributes allowed (CodeMirror sets some; they run nothing, and no
    untrusted text ever becomes markup); pictures from data: URLs (the heatmaps); no frames, no
    plugins, no other site."""
    return ("default-src 'none'; script-src 'self'; "
            f"style-src 'self' 'nonce-{nonce}'; style-src-attr 'unsafe-inline'; img-src 'self' data:; "
            "connect-src 'self'; "
            "font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def _ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
        return True
    except ValueError:
        return False


class Guard:
    """ASGI middleware: the token, Host and Origin checks, and the security headers."""

    def __init__(self, app, *, token: str, port: int, host: str = "127.0.0.1"):
        self.app, self.token, self.port = app, token, port
        names = set(LOOPBACK_NAMES)
        if host not in ("127.0.0.1", "localhost", "::1"):
            names.add(f"[{host}]" if ":" in host else host)
        self.names = names
        self.any_ip = host in ("0.0.0.0", "::")   # bound to every address: any IP literal, never a name

    # -- the checks ------------------------------------------------------------------------------

    def host_ok(self, value: str) -> bool:
        name, sep, port = value.rpartition(":")
        if not sep or port != str(self.port) or "]" in port:
            return False
        name = name.lower()
        return name in self.names or (self.any_ip and _ip_literal(name))

    def origin_ok(self, origin: str, host: str) -> bool:
        """The Origin must be this server, as the page was loaded (http://<the Host header>)."""
        return origin == f"http://{host}" and self.host_ok(host)

    def token_ok(self, candidate: str | None) -> bool:
        if not candidate:
            return False
        return hmac.compare_digest(candidate.encode(), self.token.encode())

    # -- ASGI ------------------------------------------------------------------------------------

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":   # no websockets here; lifespan passes through
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        nonce = secrets.token_urlsafe(16)
        scope.setdefault("state", {})["csp_nonce"] = nonce
        secure = _secure_send(send, nonce)
        host = headers.get("host", "")
        if not self.host_ok(host):
            await _plain(secure, 403, "refused: this server answers only requests for its own address (Host header)")
            return
        auth = headers.get("authorization", "")
        from_header = auth[6:].strip() if auth.lower().startswith("token ") else None
        method = scope["method"].upper()
        if method not in SAFE_METHODS:
            if not self.origin_ok(headers.get("origin", ""), host):
                await _plain(secure, 403, "refused: a request that changes something must come from this server's page (Origin header)")
                return
            if headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
                await _plain(secure, 415, "refused: send JSON (Content-Type: application/json)")
                return
        public = method in SAFE_METHODS and scope.get("path", "/") in PUBLIC_PATHS
        if not public and not self.token_ok(from_header):
            await _plain(secure, 403, "refused: open the link that `lumen-ex serve` printed (it carries the token)")
            return
        await self.app(scope, receive, secure)


def _secure_send(send, nonce: str):
    """``send`` with the security headers added to the start of every answer (and any CORS
    header a route might add taken out)."""
    extra = [(b"content-security-policy", csp(nonce).encode()), (b"x-frame-options", b"DENY"),
             (b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"),
             (b"cache-control", b"no-store"), (b"cross-origin-opener-policy", b"same-origin"),
             (b"cross-origin-resource-policy", b"same-origin")]
    replaced = {name for name, _ in extra}

    async def wrapped(message):
        if message["type"] == "http.response.start":
            kept = [(k, v) for k, v in message.get("headers", [])
                    if k.lower() not in replaced and not k.lower().startswith(b"access-control-")]
            message = {**message, "headers": kept + extra}
        await send(message)

    return wrapped


async def _plain(send, status: int, text: str) -> None:
    body = (text + "\n").encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})

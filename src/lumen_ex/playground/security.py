"""Who may use the playground's server, and the headers every answer carries.

The server runs the learner's code (in the sandbox) on request, so it must answer only the page
it served, in the learner's own browser:

- a **token** (random, 256 bits) is required on every request: in the URL the command prints
  (``/?token=...``, which sets an HttpOnly, SameSite=Strict cookie and redirects to drop it from
  the address bar), then the cookie, or an ``Authorization: token ...`` header; compared in
  constant time;
- the **Host** header must name this server (``127.0.0.1``, ``localhost`` or ``[::1]`` with its
  port, or the address given with ``--host``; any IP address when bound to all of them): a page
  on another site that rebinds its own name to 127.0.0.1 (DNS rebinding) is refused;
- a request that changes something (anything but GET and HEAD) also needs an ``Origin`` header
  naming this server, and a JSON body: another site's form or script cannot post to it;
- no CORS headers are ever sent; every answer forbids framing and inline scripts
  (Content-Security-Policy) and is never cached.

:class:`Guard` is plain ASGI middleware, so streamed answers (server-sent events) pass through it
unchanged. tests/e2e/test_playground_http.py sends the requests it must refuse.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, urlencode

SAFE_METHODS = ("GET", "HEAD")
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
        self.cookie = f"lumen_ex_token_{port}"
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
        return bool(candidate) and hmac.compare_digest(candidate.encode(), self.token.encode())

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
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"))
        from_query = dict(query).get("token")
        cookies = SimpleCookie()
        try:
            cookies.load(headers.get("cookie", ""))
        except Exception:  # noqa: BLE001  a malformed cookie header is just no cookie
            cookies = SimpleCookie()
        from_cookie = cookies[self.cookie].value if self.cookie in cookies else None
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
        if self.token_ok(from_query) and method in SAFE_METHODS:
            # The printed link: keep the token in a cookie, and take it out of the address bar.
            rest = urlencode([(k, v) for k, v in query if k != "token"])
            location = scope.get("path", "/") + (f"?{rest}" if rest else "")
            cookie = f"{self.cookie}={self.token}; Path=/; HttpOnly; SameSite=Strict"
            await secure({"type": "http.response.start", "status": 303,
                          "headers": [(b"location", location.encode("latin-1")), (b"set-cookie", cookie.encode("latin-1")),
                                      (b"content-length", b"0")]})
            await secure({"type": "http.response.body", "body": b""})
            return
        if not (self.token_ok(from_cookie) or self.token_ok(from_header)):
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

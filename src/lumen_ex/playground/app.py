"""The playground's routes (Starlette): the page, its bundle, and a small JSON API.

==========================================  ===============================================================
``GET /``                                   the page (src/lumen_ex/playground/page.html, no inline script)
``GET /static/app.js``, ``app.css``         the bundle built from frontend/
``GET /api/state``                          the workspace, the sandbox, every exercise with progress
``GET /api/exercises/{slug}``               its README as HTML, the file's text and digest
``POST /api/exercises/{slug}/open``         the page opened it: make its session ready (a warm worker)
``GET /api/exercises/{slug}/file``          the file's text and digest now (the page compares)
``PUT /api/exercises/{slug}/file``          save ``{text, base}``; 409 with the disk's text if not ``base``
``POST /api/exercises/{slug}/check``        save ``{text, base}``, then start a check: ``{check, digest}``
``GET /api/checks/{id}/events``             server-sent events: progress, then result/cancelled/failed
``POST /api/checks/{id}/cancel``            stop that check
``POST /api/exercises/{slug}/hint``         the next hint (as ``lumen-ex hint``)
``POST /api/exercises/{slug}/restore``      the stub back (the old text kept in .lumen-ex/backups)
==========================================  ===============================================================

Every route sits behind :class:`lumen_ex.playground.security.Guard`. Bodies are JSON of at most
:data:`MAX_BODY` bytes. Errors are ``{"error": "one line. The next step"}`` with a 4xx status.
No GET starts work: a worker is only ever started by a POST (which needs the token, this server's
Origin and a JSON body), and the check service keeps at most one waiting worker, however many
``open`` requests arrive (src/lumen_ex/playground/checks.py).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from lumen_ex.core import catalog as catalog_mod
from lumen_ex.core.catalog import Exercise
from lumen_ex.core.errors import LumenError
from lumen_ex.core.untrusted import one_line
from lumen_ex.playground import files
from lumen_ex.playground.checks import Busy, CheckService
from lumen_ex.playground.readme import readme_html
from lumen_ex.playground.security import Guard

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
BUNDLE = ("app.js", "app.css")
MAX_BODY = files.MAX_TEXT_BYTES * 2 + 4096     # a JSON-escaped file and its digest
KEEPALIVE_S = 15.0                              # an event-stream comment this often while a check runs


def bundle_built() -> bool:
    return all((STATIC / name).is_file() for name in BUNDLE)


class BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _error(status: int, message: str, **more) -> JSONResponse:
    return JSONResponse({"error": one_line(message), **more}, status_code=status)


async def _json_body(request: Request) -> dict:
    """The request's JSON object, read up to MAX_BODY bytes (413 past that)."""
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
        raise BadRequest(413, f"the request is over {MAX_BODY} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise BadRequest(413, f"the request is over {MAX_BODY} bytes")
        chunks.append(chunk)
    try:
        data = json.loads(b"".join(chunks) or b"{}")
    except ValueError:
        raise BadRequest(400, "the request is not JSON") from None
    if not isinstance(data, dict):
        raise BadRequest(400, "the request is not a JSON object")
    return data


def _text_and_base(data: dict) -> tuple[str, str]:
    text, base = data.get("text"), data.get("base")
    if not isinstance(text, str) or not isinstance(base, str):
        raise BadRequest(400, "send {text, base}: the editor's text and the digest it started from")
    return text, base


def create_app(service: CheckService, *, token: str, port: int, host: str = "127.0.0.1") -> Guard:
    """The playground's ASGI application, with its guard."""
    ws = service.workspace

    def exercise(request: Request):
        try:
            return catalog_mod.load().find(request.path_params["slug"])
        except LumenError as exc:
            raise BadRequest(404, str(exc)) from None

    async def page(request: Request) -> Response:
        if not bundle_built():
            return HTMLResponse((HERE / "missing.html").read_text(), status_code=503)
        nonce = request.scope["state"]["csp_nonce"]
        return HTMLResponse((HERE / "page.html").read_text().replace("@NONCE@", nonce))

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in BUNDLE or not bundle_built():
            return _error(404, f"no such file: {name}")
        media = "text/javascript" if name.endswith(".js") else "text/css"
        return FileResponse(STATIC / name, media_type=media)

    async def state(request: Request) -> Response:
        from lumen_ex.learner.progress import list_document, list_exercises

        _, rows = list_exercises(ws.root)
        doc = list_document(ws, rows)
        return JSONResponse({"workspace": str(ws.root), "sandbox": service.sandbox_info,
                             "exercises": doc["exercises"]})

    async def exercise_info(request: Request) -> Response:
        ex = exercise(request)
        disk = files.read(ws.root / ex.dir / ex.file)
        return JSONResponse({"slug": ex.slug, "number": ex.number, "title": ex.title, "path": ex.path,
                             "readme_html": readme_html(ex.root / "README.md"), **disk.to_dict()})

    async def file_now(request: Request) -> Response:
        ex = exercise(request)
        return JSONResponse(files.read(ws.root / ex.dir / ex.file).to_dict())

    async def open_exercise(request: Request) -> Response:
        ex = exercise(request)
        await _json_body(request)
        service.warm(ex.slug)
        return JSONResponse({"opened": ex.slug})

    def _save(ex: Exercise, data: dict) -> str:
        text, base = _text_and_base(data)
        return files.save(ws.root / ex.dir / ex.file, text, base, root=ws.root)

    async def save(request: Request) -> Response:
        ex = exercise(request)
        return JSONResponse({"digest": _save(ex, await _json_body(request))})

    async def check(request: Request) -> Response:
        ex = exercise(request)
        data = await _json_body(request)
        if service.current is not None and not service.current.done:
            raise Busy("a check is running already", "Wait for it, or press Cancel")
        digest = _save(ex, data)
        started = service.start(ex.slug)
        return JSONResponse({"check": started.id, "digest": digest})

    async def events(request: Request) -> Response:
        found = service.checks.get(request.path_params["id"])
        if found is None:
            return _error(404, "no such check (it ended long ago, or the server restarted)")
        loop = asyncio.get_running_loop()
        changed = asyncio.Event()
        found.notify = lambda: loop.call_soon_threadsafe(changed.set)

        async def stream():
            sent = 0
            while True:
                while sent < len(found.events):
                    name, data = found.events[sent]
                    sent += 1
                    yield f"event: {name}\ndata: {json.dumps(data)}\n\n"
                if found.done and sent >= len(found.events):
                    return
                try:
                    await asyncio.wait_for(changed.wait(), KEEPALIVE_S)
                except asyncio.TimeoutError:
                    yield ": still checking\n\n"
                changed.clear()

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"x-accel-buffering": "no"})

    async def cancel(request: Request) -> Response:
        await _json_body(request)
        return JSONResponse({"cancelled": service.cancel(request.path_params["id"])})

    async def hint(request: Request) -> Response:
        from lumen_ex.learner.progress import next_hint

        ex = exercise(request)
        await _json_body(request)
        if not ex.hints:
            return JSONResponse({"number": 0, "total": 0, "text": "This exercise has no hints."})
        h = next_hint(ex.slug, ws.root)
        return JSONResponse({"number": h.index + 1, "total": h.total, "text": h.text, "because": h.because})

    async def restore(request: Request) -> Response:
        ex = exercise(request)
        await _json_body(request)
        return JSONResponse(files.restore_stub(ws, ex, ws.root / ex.dir / ex.file).to_dict())

    routes = [
        Route("/", page),
        Route("/static/{name}", static),
        Route("/api/state", state),
        Route("/api/exercises/{slug}", exercise_info),
        Route("/api/exercises/{slug}/open", open_exercise, methods=["POST"]),
        Route("/api/exercises/{slug}/file", file_now, methods=["GET"]),
        Route("/api/exercises/{slug}/file", save, methods=["PUT"]),
        Route("/api/exercises/{slug}/check", check, methods=["POST"]),
        Route("/api/checks/{id}/events", events),
        Route("/api/checks/{id}/cancel", cancel, methods=["POST"]),
        Route("/api/exercises/{slug}/hint", hint, methods=["POST"]),
        Route("/api/exercises/{slug}/restore", restore, methods=["POST"]),
    ]

    async def bad_request(request, exc: BadRequest):
        return _error(exc.status, str(exc))

    async def conflict(request, exc: files.Conflict):
        return _error(409, "the file changed on disk", conflict=exc.disk.to_dict())

    async def busy(request, exc: Busy):
        return _error(409, str(exc))

    async def lumen_error(request, exc: LumenError):
        return _error(400, str(exc))

    app = Starlette(routes=routes, exception_handlers={
        # Starlette types a handler's exception as Exception; each of these takes the class it is registered for
        BadRequest: bad_request, files.Conflict: conflict, Busy: busy, LumenError: lumen_error})  # type: ignore[dict-item]
    return Guard(app, token=token, port=port, host=host)

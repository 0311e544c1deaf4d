"""`lumen-ex serve` refuses what it must: no token, a wrong one, a foreign Host (DNS rebinding), a
foreign or missing Origin on a request that changes something, a body that is not JSON or too
large; it sends no CORS headers, forbids framing and inline scripts, binds to 127.0.0.1 only, and
never overwrites a file that changed on disk. Each refusal is checked to have changed nothing.

The server runs for real (the command, a process of its own); requests are raw HTTP, so any header
can be set as an attacker's page or tool would.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess

import pytest
from conftest import REFERENCES, make_workspace, requires_bwrap
from playground_support import serve, workers_of
from proc_support import descendants, read, still_running_after

STUB_PATH = "01-attention/attention.py"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    ws = make_workspace(tmp_path_factory.mktemp("serve"))
    server = serve(ws.root, "--sandbox", "none")
    server.ws = ws
    yield server
    assert server.stop() == 0
    assert "Traceback" not in "\n".join(server.printed)


def _progress(ws) -> str:
    path = ws.root / ".lumen-ex" / "progress.json"
    return path.read_text() if path.exists() else ""


def _file(ws) -> bytes:
    return (ws.root / STUB_PATH).read_bytes()


# -- the token -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/state", "/api/exercises/attention", "/api/exercises/attention/file",
                                  "/api/checks/1-x/events", "/api/nowhere"])
def test_no_token_no_answer(served, path):
    status, headers, body = served.request("GET", path, token=None)
    assert status == 403
    assert b"token" in body and b"attention" not in body


@pytest.mark.parametrize("path", ["/", "/static/app.js", "/static/app.css"])
def test_the_page_and_its_bundle_need_no_token_and_hold_nothing_of_the_workspace(served, path):
    """The page must load to read its token from the link's fragment; it is the same for everyone."""
    status, headers, body = served.request("GET", path, token=None)
    assert status in (200, 503)      # 503: the bundle is not built (the page says how to build it)
    assert str(served.ws.root).encode() not in body and b"def scaled_dot_product_attention" not in body
    assert "set-cookie" not in headers


@pytest.mark.parametrize("wrong", ["", "x", "PREFIX", "TOKEN+1", "token-case"])
def test_a_wrong_token_is_refused(served, wrong):
    bad = {"": "", "x": "x", "PREFIX": served.token[:-1], "TOKEN+1": served.token + "a",
           "token-case": served.token.swapcase()}[wrong]
    status, _, _ = served.request("GET", "/api/state", token=bad or " ")
    assert status == 403


@pytest.mark.parametrize("how", ["cookie", "other-port-cookie", "query", "basic"])
def test_the_token_counts_only_in_its_header(served, how):
    """A cookie is no credential (every local port can read and set 127.0.0.1's cookies), nor the
    query string (it lands in logs and history): the right token there is refused."""
    headers, path = {}, "/api/state"
    if how == "cookie":
        headers["Cookie"] = f"lumen_ex_token_{served.port}={served.token}"
    elif how == "other-port-cookie":
        headers["Cookie"] = f"lumen_ex_token_{served.port + 1}={served.token}; lumen_ex_token={served.token}"
    elif how == "query":
        path = f"/api/state?token={served.token}"
    else:
        headers["Authorization"] = f"Basic {served.token}"
    status, _, _ = served.request("GET", path, token=None, headers=headers)
    assert status == 403


def test_the_printed_link_carries_the_token_in_its_fragment_and_no_cookie_is_set(served):
    assert served.url == f"http://127.0.0.1:{served.port}/#token={served.token}"
    for path in ("/", f"/?token={served.token}", "/api/state"):
        _, headers, _ = served.request("GET", path)
        assert "set-cookie" not in headers, path


def test_a_spoiled_cookie_locks_nobody_out(served):
    """Another local page may set any cookie for 127.0.0.1, an unparseable one included: the
    page's own requests (the token in their header) are answered all the same."""
    for junk in ("lumen_ex_token_%d=garbage" % served.port, "lumen_ex_token_%d=" % served.port,
                 'lumen_ex_token="garbage', "lumen-ex-token=x; a=b", "=;;;", "a=" + "b" * 3000):
        status, _, body = served.request("GET", "/api/state", headers={"Cookie": junk})
        assert status == 200 and json.loads(body)["exercises"], junk


# -- the Host header (DNS rebinding) ---------------------------------------------------------------


@pytest.mark.parametrize("host", ["evil.example:{port}", "127.0.0.1.evil.example:{port}", "localhost.:{port}",
                                  "127.0.0.1:{other}", "127.0.0.1", "", "10.0.0.1:{port}", "[::2]:{port}",
                                  "127.0.0.1:{port}@evil.example"])
def test_a_foreign_host_is_refused_even_with_the_token(served, host):
    value = host.format(port=served.port, other=served.port + 1)
    status, _, body = served.request("GET", "/api/state", host=value)
    assert status == 403, value
    assert b"Host" in body


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}", "[::1]:{port}"])
def test_its_own_names_are_answered(served, host):
    status, _, _ = served.request("GET", "/api/state", host=host.format(port=served.port))
    assert status == 200


# -- Origin, and requests that change something ----------------------------------------------------------


@pytest.mark.parametrize("origin", [None, "null", "http://evil.example", "http://127.0.0.1:{other}",
                                    "https://127.0.0.1:{port}", "http://127.0.0.1:{port}.evil.example",
                                    "http://localhost:{port}"])
@pytest.mark.parametrize("method,path,body", [
    ("POST", "/api/exercises/attention/hint", {}),
    ("POST", "/api/exercises/attention/restore", {}),
    ("PUT", "/api/exercises/attention/file", {"text": "import os\n", "base": "?"}),
    ("POST", "/api/exercises/attention/check", {"text": "import os\n", "base": "?"}),
])
def test_a_foreign_or_missing_origin_changes_nothing(served, origin, method, path, body):
    value = origin.format(port=served.port, other=served.port + 1) if origin else None
    before = (_progress(served.ws), _file(served.ws))
    status, headers, text = served.request(method, path, body, origin=value)
    assert status == 403, (value, text)
    assert b"Origin" in text
    assert (_progress(served.ws), _file(served.ws)) == before


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x"])
def test_a_form_post_is_refused(served, content_type):
    before = _progress(served.ws)
    status, _, _ = served.request("POST", "/api/exercises/attention/hint", b"{}", content_type=content_type)
    assert status == 415
    assert _progress(served.ws) == before


def test_the_unisolated_mode_is_labelled(served):
    status, state = served.json("GET", "/api/state")
    assert state["sandbox"]["isolated"] is False and "NOT ISOLATED" in state["sandbox"]["note"]
    assert any("NOT ISOLATED" in line for line in served.printed)


def test_the_same_request_from_the_page_is_answered(served):
    status, hint = served.json("POST", "/api/exercises/attention/hint", {})
    assert status == 200 and hint["number"] == 1 and hint["text"]


def test_no_cors_headers_ever(served):
    for method, path, origin in [("OPTIONS", "/api/state", "http://evil.example"),
                                 ("GET", "/api/state", "http://evil.example"), ("GET", "/api/state", "same")]:
        _, headers, _ = served.request(method, path, origin=origin,
                                       headers={"Access-Control-Request-Method": "POST"})
        assert not [h for h in headers if h.startswith("access-control-")], (method, headers)


def test_every_answer_forbids_framing_inline_scripts_and_caching(served):
    for path, token in [("/", "header"), ("/api/state", "header"), ("/api/state", None)]:
        _, headers, _ = served.request("GET", path, token=token)
        csp = headers["content-security-policy"]
        scripts = next(d for d in csp.split("; ") if d.startswith("script-src "))
        assert scripts == "script-src 'self'" and "unsafe-eval" not in csp
        assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp
        assert headers["x-frame-options"] == "DENY"
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["cache-control"] == "no-store"


def test_the_page_has_no_inline_script_and_its_nonce_is_fresh(served):
    _, h1, page = served.request("GET", "/")
    _, h2, _ = served.request("GET", "/")
    html = page.decode()
    assert "<script" in html and all("src=" in tag for tag in html.split("<script")[1:])
    assert h1["content-security-policy"] != h2["content-security-policy"]   # a nonce per answer


def test_websockets_are_closed(served):
    status, _, _ = served.request("GET", "/api/state", headers={"Upgrade": "websocket", "Connection": "Upgrade",
                                                                "Sec-WebSocket-Version": "13",
                                                                "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
    assert status != 101


# -- bounds and conflicts --------------------------------------------------------------------------------


def test_a_body_over_the_bound_is_refused(served):
    before = _file(served.ws)
    status, _, _ = served.request("PUT", "/api/exercises/attention/file",
                                  b'{"text": "' + b"x" * (600 * 1024) + b'", "base": "x"}')
    assert status == 413
    status, _ = served.json("PUT", "/api/exercises/attention/file", {"text": "x" * (300 * 1024), "base": "x"})
    assert status == 400
    assert _file(served.ws) == before


def test_a_chunked_body_over_the_bound_is_refused(served):
    """No Content-Length to check first: the bound holds while the body is read."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=30)
    conn.putrequest("PUT", "/api/exercises/attention/file")
    for k, v in {"Authorization": f"token {served.token}", "Origin": served.base, "Content-Type": "application/json",
                 "Transfer-Encoding": "chunked"}.items():
        conn.putheader(k, v)
    conn.endheaders()
    before = _file(served.ws)
    try:
        for _ in range(20):
            chunk = b"x" * (64 * 1024)
            conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        conn.send(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert conn.getresponse().status == 413
    conn.close()
    assert _file(served.ws) == before


@pytest.mark.parametrize("body", [b"[]", b"not json", b'{"text": 3, "base": "x"}', b'{"text": "x"}'])
def test_a_malformed_body_is_a_clear_400(served, body):
    status, _, text = served.request("PUT", "/api/exercises/attention/file", body)
    assert status == 400 and json.loads(text)["error"]


def test_an_unknown_exercise_is_a_404(served):
    status, body = served.json("GET", "/api/exercises/nope")
    assert status == 404 and "nope" in body["error"]


def test_a_save_over_a_changed_file_is_refused_with_what_is_on_disk(served):
    path = served.ws.root / STUB_PATH
    status, first = served.json("GET", "/api/exercises/attention/file")
    assert first["digest"] == hashlib.sha256(path.read_bytes()).hexdigest()
    path.write_text("# saved by another editor\n")                  # another editor saves
    status, body = served.json("PUT", "/api/exercises/attention/file", {"text": "# mine\n", "base": first["digest"]})
    assert status == 409
    assert body["conflict"]["text"] == "# saved by another editor\n"
    assert path.read_text() == "# saved by another editor\n"        # not overwritten
    # Keeping mine, knowingly: the new base.
    status, body2 = served.json("PUT", "/api/exercises/attention/file",
                                {"text": "# mine\n", "base": body["conflict"]["digest"]})
    assert status == 200 and path.read_text() == "# mine\n"
    assert body2["digest"] == hashlib.sha256(b"# mine\n").hexdigest()
    # A check saves first, under the same rule.
    status, body3 = served.json("POST", "/api/exercises/attention/check", {"text": "# other\n", "base": first["digest"]})
    assert status == 409 and path.read_text() == "# mine\n"


def test_a_link_in_place_of_the_file_is_replaced_never_written_through(served, tmp_path):
    path = served.ws.root / STUB_PATH
    outside = tmp_path / "outside.py"
    outside.write_text("# outside\n")
    path.unlink()
    path.symlink_to(outside)
    status, disk = served.json("GET", "/api/exercises/attention/file")
    status, _ = served.json("PUT", "/api/exercises/attention/file", {"text": "# in place\n", "base": disk["digest"]})
    assert status == 200
    assert outside.read_text() == "# outside\n" and not path.is_symlink()
    path.write_text(REFERENCES["attention"].read_text())


def test_restore_keeps_the_old_text(served):
    path = served.ws.root / STUB_PATH
    path.write_text("# my work\n")
    status, body = served.json("POST", "/api/exercises/attention/restore", {})
    assert status == 200 and "NotImplementedError" in path.read_text() and body["text"] == path.read_text()
    backups = list((served.ws.root / ".lumen-ex" / "backups").iterdir())
    assert any(b.read_text() == "# my work\n" for b in backups)


@pytest.mark.parametrize("folder", ["01-attention", ".lumen-ex", ".lumen-ex/backups"])
def test_no_write_follows_a_link_in_a_folder_above_the_file(served, tmp_path, folder):
    """A folder on the way to a written file (the exercise's, the state folder, the backups) that
    is a link to elsewhere refuses the save, the check's save and the restore: nothing is written
    outside the workspace, and the link is left as it was."""
    root = served.ws.root
    (root / ".lumen-ex" / "backups").mkdir(parents=True, exist_ok=True)
    real = root / folder
    moved = tmp_path / "moved"
    real.rename(moved)                              # the real folder's content, now outside
    real.symlink_to(moved, target_is_directory=True)
    before = {str(p.relative_to(tmp_path)): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    try:
        _, disk = served.json("GET", "/api/exercises/attention/file")
        base = disk["digest"] if disk and "digest" in disk else "missing"
        saved, body = served.json("PUT", "/api/exercises/attention/file", {"text": "# through a link\n", "base": base})
        checked, _ = served.json("POST", "/api/exercises/attention/check", {"text": "# through a link\n", "base": base})
        restored, rbody = served.json("POST", "/api/exercises/attention/restore", {})
        after = {str(p.relative_to(tmp_path)): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
        if folder == "01-attention":
            assert saved == 400 and "link" in body["error"], body
            assert checked == 400
        assert restored == 400 and "link" in rbody["error"], rbody
        assert after == before, "a write went through the link"
        assert real.is_symlink()
    finally:
        real.unlink()
        moved.rename(real)


@pytest.mark.slow
def test_no_get_starts_a_worker(tmp_path):
    """A flood of GETs (every route a page may load, alternating exercises) starts no worker: only
    a POST from the page (token, Origin, JSON) does, and a flood of those keeps one waiting worker."""
    import time

    ws = make_workspace(tmp_path)
    server = serve(ws.root, "--sandbox", "none")
    mine = lambda: workers_of(server.proc.pid)  # noqa: E731
    try:
        for i in range(60):
            slug = ("attention", "kv-cache", "prefill")[i % 3]
            for path in (f"/api/exercises/{slug}", f"/api/exercises/{slug}/file", "/api/state", "/"):
                assert server.request("GET", path)[0] in (200, 503), path
        time.sleep(1)
        assert mine() == [], "a GET started work"
        for i in range(30):
            status, _ = server.json("POST", f"/api/exercises/{('attention', 'kv-cache', 'rope')[i % 3]}/open", {})
            assert status == 200
        most, deadline = 0, time.monotonic() + 15       # sampled while the opens are served
        while time.monotonic() < deadline:
            most = max(most, len(mine()))
            time.sleep(0.2)
        assert most <= 2, f"{most} workers at once"    # the session closing and the one opened last
    finally:
        assert server.stop() == 0


# -- where it listens ------------------------------------------------------------------------------------


def _other_address() -> str | None:
    try:
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=5).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return next((a for a in out if "." in a and not a.startswith("127.")), None)


def test_it_listens_on_127_0_0_1_only(served):
    address = _other_address()
    if address is None:
        pytest.skip("this machine has no address but loopback")
    with socket.socket() as s:
        s.settimeout(2)
        assert s.connect_ex((address, served.port)) != 0


def test_another_host_is_warned_about(tmp_path):
    ws = make_workspace(tmp_path)
    server = serve(ws.root, "--sandbox", "none", "--host", "0.0.0.0")
    try:
        assert any(line.startswith("warning: listening on 0.0.0.0") for line in server.printed)
        # Bound to every address: an IP address is a name it answers to, another name is not.
        assert server.request("GET", "/api/state", host=f"127.0.0.1:{server.port}")[0] == 200
        assert server.request("GET", "/api/state", host=f"evil.example:{server.port}")[0] == 403
    finally:
        assert server.stop() == 0


# -- errors a learner can fix: one line and the next step ---------------------------------------------


def _serve_fails(*args: str, cwd=None, env=None) -> subprocess.CompletedProcess:
    from conftest import LUMEN_EX

    return subprocess.run([LUMEN_EX, "serve", "--no-browser", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env=env)


def test_no_workspace_is_one_line(tmp_path):
    proc = _serve_fails("--port", "0", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "lumen-ex init" in proc.stderr and "Traceback" not in proc.stderr


def test_docker_without_its_image_is_one_line_with_the_build_command(tmp_path):
    """`serve --sandbox docker` forks its workers in one container of the grader image (as watch
    does); without that image it says so in one line, with the command that builds it. Where the
    engine itself is not running (a laptop with docker stopped), the one line says to start it."""
    from lumen_ex.image import engine

    ws = make_workspace(tmp_path)
    proc = _serve_fails("--port", "0", "--workspace", str(ws.root), "--sandbox", "docker",
                        env={**os.environ, "LUMEN_EX_IMAGE": "lumen-ex-grader:never-built"})
    assert proc.returncode != 0
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    next_step = "lumen-ex image build" if engine.engine().running else "start it"
    assert "docker" in proc.stderr and next_step in proc.stderr, proc.stderr


def test_a_busy_port_is_one_line(tmp_path, served):
    ws = make_workspace(tmp_path)
    proc = _serve_fails("--port", str(served.port), "--workspace", str(ws.root), "--sandbox", "none")
    assert proc.returncode == 2
    assert f"cannot listen on 127.0.0.1:{served.port}" in proc.stderr and "--port" in proc.stderr


@pytest.mark.slow
def test_a_failing_checks_progress_names_its_first_failing_test_before_the_result(tmp_path):
    """The page's progress events (src/lumen_ex/harness/progress.py, shown by frontend/src/result.js
    showProgress) carry the first failing test's title as soon as it fails, before the result event."""
    import time

    from conftest import best_sandbox

    from lumen_ex.playground.checks import CheckService

    ws = make_workspace(tmp_path)
    target = ws.root / "01-attention" / "attention.py"
    target.write_text(REFERENCES["attention"].read_text().replace("/ math.sqrt(d_k)", ""))
    service = CheckService(ws, sandbox=best_sandbox(), seed=3)
    try:
        check = service.start("attention")
        deadline = time.monotonic() + 120
        while not check.done:
            assert time.monotonic() < deadline, check.events
            time.sleep(0.05)
    finally:
        service.close()
    kinds = [kind for kind, _ in check.events]
    assert kinds[-1] == "result" and set(kinds[:-1]) == {"progress"}, kinds
    told = [i for i, (kind, data) in enumerate(check.events) if kind == "progress" and data["first_failed"]]
    assert told and told[0] < len(kinds) - 1
    assert check.events[told[0]][1]["failed"] >= 1 and check.events[-1][1]["record"]["status"] == "fail"


@requires_bwrap
@pytest.mark.slow
def test_opening_another_exercise_forks_from_the_same_zygote_and_closing_stops_it(tmp_path):
    """The page's sessions share one launcher (src/lumen_ex/learner/prewarm.py SharedLauncher): a
    check of another exercise forks its worker from the zygote that imported torch for the first,
    and gets its own verdict; closing the service stops the zygote."""
    import time

    from lumen_ex.playground.checks import CheckService

    ws = make_workspace(tmp_path)
    (ws.root / "01-attention" / "attention.py").write_text(REFERENCES["attention"].read_text())
    service = CheckService(ws, sandbox="bwrap", seed=3)
    records, zygotes = {}, []
    try:
        for slug in ("attention", "kv-cache", "attention"):
            check = service.start(slug)
            deadline = time.monotonic() + 120
            while not check.done:
                assert time.monotonic() < deadline, check.events
                time.sleep(0.05)
            kind, data = check.events[-1]
            assert kind == "result", check.events[-1]
            records.setdefault(slug, []).append(data["record"]["status"])
            zygote = service.shared.launcher.zygote
            assert zygote is not None and zygote.alive()
            zygotes.append(zygote.proc.pid)
        assert records == {"attention": ["pass", "pass"], "kv-cache": ["fail"]}     # the reference, then the stub
        assert len(set(zygotes)) == 1 and service.shared.launcher.forked >= 3
        # the zygote and whatever it forked (other tests' zygotes may be running in this process too)
        ours = [read(zygotes[0]), *descendants(zygotes[0]).values()]
        assert any(p is not None and p.shows("zygote.py") for p in ours)
    finally:
        service.close()
    assert not still_running_after([p for p in ours if p is not None])

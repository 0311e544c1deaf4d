"""The playground in a real headless browser (Debian's chromium, driven by Playwright): a learner
types a buggy solution, presses Ctrl+Enter, sees the shape-first panel and the named mistake,
types a correct one, presses Check, sees "All tests passed", and the file on disk is the editor's
text. Also: what the learner's code prints stays text, a change on disk is offered for reload, a
check can be cancelled, hints and restoring the stub work, by their accessible names. And the
credential: a page served from another local port (another server of the learner's, another user's)
can neither read the token nor spoil it, and a tab opened without the printed link gets nothing.

The server is the real command (src/lumen_ex/playground), with the real sandbox (bwrap where it
works here). Without chromium these tests skip, saying so, unless LUMEN_EX_REQUIRE_BROWSER is set
(.ci/run sets it: there a missing browser is a failure, not a skip).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import REFERENCES, best_sandbox, make_workspace
from playground_support import processes_naming, serve
from proc_support import wait_until

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    if os.environ.get("LUMEN_EX_REQUIRE_BROWSER"):
        raise RuntimeError("LUMEN_EX_REQUIRE_BROWSER is set, but there is no chromium: apt-get install -y chromium")
    pytest.skip("no chromium here (Debian: apt-get install -y chromium)", allow_module_level=True)
if os.environ.get("LUMEN_EX_REQUIRE_BROWSER"):
    import playwright.sync_api as sync_api
else:
    sync_api = pytest.importorskip("playwright.sync_api")

pytestmark = pytest.mark.slow

REFERENCE = REFERENCES["attention"].read_text()
RETURN_LINE = "    return weights @ v, weights                                  # (..., L_q, d_v), (..., L_q, L_k)\n"
assert RETURN_LINE in REFERENCE
NO_SCALE = REFERENCE.replace(" / math.sqrt(d_k)", "")
assert NO_SCALE != REFERENCE
HEAD, SDPA = REFERENCE.split("def scaled_dot_product_attention", 1)
SDPA, MASK = SDPA.split("def causal_mask", 1)
# The file without scaled_dot_product_attention's last line, which the test types itself: causal_mask
# first, so that the typed line ends the file.
UNFINISHED = HEAD + "def causal_mask" + MASK.rstrip("\n") + "\n\n\ndef scaled_dot_product_attention" + \
    SDPA.replace(RETURN_LINE, "").rstrip("\n")
PRINTS = REFERENCE.replace(
    "    d_k = q.size(-1)\n",
    "    d_k = q.size(-1)\n    print('<script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\">\\x1b[31m')\n")
assert PRINTS != REFERENCE
LOOPS = REFERENCE.replace("    d_k = q.size(-1)\n", "    while True:\n        pass\n")
TIMEOUT_MS = 90_000


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-background-networking"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    ws = make_workspace(tmp_path_factory.mktemp("browser"))
    server = serve(ws.root, "--sandbox", best_sandbox(), "--seed", "1234")
    server.ws = ws
    yield server
    assert server.stop() == 0
    wait_until(lambda: not processes_naming(str(ws.root)), 10)
    assert processes_naming(str(ws.root)) == []     # Ctrl-C left no server, no worker, no waiting worker


@pytest.fixture
def page(browser, served):
    yield from _page(browser, served, {"width": 1400, "height": 900})


@pytest.fixture
def laptop(browser, served):
    """A 1280 x 800 window: the first failure and its picture must show without scrolling."""
    yield from _page(browser, served, {"width": 1280, "height": 800})


@pytest.fixture
def narrow(browser, served):
    """A 400 px wide window (a phone, a split screen): one column, nothing off screen sideways."""
    yield from _page(browser, served, {"width": NARROW, "height": 800})


def _page(browser, served, viewport: dict):
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(served.url + "&attention")   # #token=...&attention: the page keeps the token, opens attention
    page.wait_for_selector("body[data-ready]", timeout=TIMEOUT_MS)
    page.errors = errors
    yield page
    context.close()
    assert not [e for e in errors if "Content Security Policy" in e or "Refused" in e], errors


def code(page):
    return page.get_by_role("textbox", name="exercise code")


def replace_code(page, text: str) -> None:
    """Select everything in the editor and put ``text`` in its place (as a paste does)."""
    code(page).click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(text)


def editor_text(page) -> str:
    return page.evaluate("() => [...document.querySelectorAll('.cm-line')].map(l => l.textContent).join('\\n')")


def result(page):
    return page.get_by_role("region", name="result")


def ended(page) -> int:
    """How many checks the result region has shown the end of (its data-ended)."""
    return int(page.evaluate("() => document.getElementById('result').dataset.ended || '0'"))


def check_and_wait(page, start, state: str = "result"):
    """Start a check with ``start()`` (a key press, a click); wait for its end; the result region."""
    before = ended(page)
    start()
    page.wait_for_function(f"() => Number(document.getElementById('result').dataset.ended || 0) > {before}",
                           timeout=TIMEOUT_MS)
    region = result(page)
    assert region.get_attribute("data-state") == state, region.inner_text()
    return region


def ctrl_enter(page):
    return lambda: page.keyboard.press("Control+Enter")


@pytest.mark.slow
def test_type_a_bug_see_it_explained_fix_it_see_it_pass(page, served):
    path = served.ws.root / "01-attention" / "attention.py"
    assert result(page).get_attribute("aria-live") == "polite"
    # A shape bug, typed at the end of the file: the output's last two axes swapped.
    replace_code(page, UNFINISHED)
    page.keyboard.press("Control+End")
    page.keyboard.press("Enter")
    page.keyboard.type("return (weights @ v).transpose(-2, -1), weights")
    panel = check_and_wait(page, ctrl_enter(page))
    assert "Not yet" in panel.inner_text()
    first = panel.get_by_role("region", name="first failure")
    assert first.locator("p.line").first.inner_text().startswith("shape:")
    shape = first.locator("table.shape")
    assert shape.is_visible()
    rows = [r.inner_text() for r in shape.locator("tr").all()]
    assert "L_q" in rows[0] and "d_v" in rows[0]                       # axis names, expected
    assert "L_q" in rows[3] and "d_v" in rows[3]                       # and yours
    assert shape.locator("td.bad").count() >= 2                        # the swapped axes marked
    assert path.read_text().endswith("return (weights @ v).transpose(-2, -1), weights")   # saved before the check

    # A values bug: no 1/sqrt(d_k). The mistake is named, with its fix.
    replace_code(page, NO_SCALE)
    panel = check_and_wait(page, ctrl_enter(page))
    mistake = panel.locator("p.line.mistake")
    assert "likely mistake" in mistake.inner_text() and "sqrt(d_k)" in mistake.inner_text()
    picture = panel.locator("figure.picture img").first                 # the heatmap, as an image
    assert picture.get_attribute("src").startswith("data:image/png;base64,")
    legend = panel.locator("figure.picture figcaption .legend").first.inner_text()   # how to read it
    assert "rows: queries 0 to" in legend and "columns: keys 0 to" in legend and "red frame" in legend, legend
    assert page.evaluate("(img) => img.complete && img.naturalWidth > 0", picture.element_handle())

    # Cmd+Enter (a Mac's Ctrl+Enter) checks too.
    panel = check_and_wait(page, lambda: page.keyboard.press("Meta+Enter"))
    assert "likely mistake" in panel.locator("p.line.mistake").inner_text()

    # Correct, with the button this time.
    replace_code(page, REFERENCE)
    panel = check_and_wait(page, page.get_by_role("button", name="Check", exact=True).click)
    assert "All tests passed" in panel.inner_text()
    assert path.read_text() == REFERENCE                               # the file is the editor's text
    sync_api.expect(page.get_by_role("navigation", name="exercises")).to_contain_text("passed")


@pytest.mark.slow
def test_what_the_code_prints_stays_text(page, served):
    replace_code(page, PRINTS)
    panel = check_and_wait(page, ctrl_enter(page))
    assert "All tests passed" in panel.inner_text()
    printed = panel.locator("details.printed pre").first
    page.locator("details.printed summary").first.click()
    text = printed.inner_text()
    assert "<script>window.__pwned = 1</script>" in text and '<img src=x onerror="window.__pwned = 2">' in text
    assert "␛[31m" in text                                             # the escape shown, not run
    assert page.evaluate("() => window.__pwned") is None
    assert page.locator("#result script, #result img[src='x']").count() == 0
    assert page.evaluate("() => document.scripts.length") == 1          # the bundle only


def test_a_change_on_disk_is_offered_for_reload_never_overwritten(page, served):
    path = served.ws.root / "01-attention" / "attention.py"
    path.write_text("# saved by another editor\n")
    alert = page.get_by_role("alert")
    alert.wait_for(state="visible", timeout=10_000)
    assert "changed on disk" in alert.inner_text()
    replace_code(page, "# typed in the page meanwhile\n")              # an edit while the offer stands
    page.wait_for_timeout(1000)
    assert path.read_text() == "# saved by another editor\n"           # not saved over it
    page.get_by_role("button", name="Reload it").click()
    assert editor_text(page) == "# saved by another editor\n"
    assert alert.is_hidden()


@pytest.mark.slow
def test_cancel_a_check_then_check_again(page, served):
    replace_code(page, LOOPS)
    cancel = page.get_by_role("button", name="Cancel")

    def start_then_cancel():
        page.keyboard.press("Control+Enter")
        cancel.wait_for(state="visible", timeout=TIMEOUT_MS)
        page.wait_for_function("() => document.getElementById('result').dataset.state === 'running'")
        cancel.click()

    assert "Check cancelled" in check_and_wait(page, start_then_cancel, state="message").inner_text()
    replace_code(page, REFERENCE)
    assert "All tests passed" in check_and_wait(page, ctrl_enter(page)).inner_text()


def test_hints_and_restoring_the_stub(page, served):
    path = served.ws.root / "01-attention" / "attention.py"
    page.get_by_role("button", name="Hint").click()
    page.wait_for_selector("#hints p.hint")
    assert page.locator("#hints p.hint").first.inner_text().startswith("Hint 1 of")
    replace_code(page, "# my work\n")
    page.wait_for_function("() => document.getElementById('save-state').textContent === 'saved'")
    assert path.read_text() == "# my work\n"
    page.get_by_role("button", name="Restore the stub").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("button", name="Keep my code").click()
    assert path.read_text() == "# my work\n"
    page.get_by_role("button", name="Restore the stub").click()
    dialog.get_by_role("button", name="Restore the stub").click()
    page.wait_for_function("() => document.getElementById('save-state').textContent === 'stub restored'")
    assert "NotImplementedError" in path.read_text() and "NotImplementedError" in editor_text(page)


# -- the credential against another local port -------------------------------------------------------

ATTACKER = """<!doctype html><meta charset="utf-8"><title>another local page</title><script>
window.report = (async () => {
  const out = {cookie_before: document.cookie, storage: JSON.stringify(sessionStorage) + JSON.stringify(localStorage)};
  // Spoil: every cookie name the playground could use, for this host, and an unparseable one.
  for (const c of ["lumen_ex_token_@PORT@=garbage; path=/", "lumen_ex_token=garbage; path=/",
                   "bad\\u0022cookie=;;; path=/", "lumen-ex-token=x; path=/"]) document.cookie = c;
  out.cookie_after = document.cookie;
  // Read: the playground's API from this origin (another port): refused or opaque, never its data.
  const tries = [];
  for (const path of ["/api/state", "/api/exercises/attention/file", "/"]) {
    try {
      const r = await fetch("http://127.0.0.1:@PORT@" + path, {credentials: "include"});
      tries.push(path + ":" + r.status + ":" + (await r.text()).slice(0, 200));
    } catch (e) { tries.push(path + ":blocked"); }
  }
  try {
    await fetch("http://127.0.0.1:@PORT@/api/exercises/attention/restore",
                {method: "POST", mode: "no-cors", credentials: "include", body: "{}"});
  } catch (e) {}
  out.tries = tries;
  return out;
})();
</script>"""


@pytest.fixture
def other_port(tmp_path, served):
    """A page served from another local port (python's http.server): what another program of the
    learner's, or another user's, can serve on 127.0.0.1."""
    import socket
    import subprocess
    import sys
    import time

    (tmp_path / "index.html").write_text(ATTACKER.replace("@PORT@", str(served.port)))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/"
    proc.kill()
    proc.wait()


@pytest.mark.slow
def test_another_local_port_can_neither_read_nor_spoil_the_credential(browser, served, other_port):
    """In one browser (one cookie jar for 127.0.0.1, as every browser keeps it), the learner opens
    the printed link, then a page on another port runs: it sees no token (not in its cookies, not
    in its storage), cannot read the playground's API, sets every cookie it likes; the learner's
    page then still checks and saves, and a tab opened without the link is refused."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        learner = context.new_page()
        learner.goto(served.url + "&attention")
        learner.wait_for_selector("body[data-ready]", timeout=TIMEOUT_MS)
        assert served.token not in learner.url            # out of the address bar once read
        # Nothing in the browser's cookie jar holds it: 127.0.0.1's cookies go to every port.
        assert not [c for c in context.cookies() if served.token in c["value"]], context.cookies()
        other = context.new_page()
        other.goto(other_port)
        report = other.evaluate("() => window.report")
        assert served.token not in json_text(report), report
        assert all(t.endswith(":blocked") or ":403:" in t or (t.startswith("/:") and served.token not in t)
                   for t in report["tries"]), report
        assert "def scaled_dot_product_attention" not in json_text(report)
        # The learner's page is not locked out: it still saves and checks.
        replace_code(learner, REFERENCE)
        region = check_and_wait(learner, lambda: learner.get_by_role("button", name="Check", exact=True).click())
        assert "All tests passed" in region.inner_text()
        assert (served.ws.root / "01-attention" / "attention.py").read_text() == REFERENCE
        # A new tab of the same origin without the link gets nothing: the token is this tab's alone.
        bare = context.new_page()
        bare.goto(served.base + "/")
        bare.wait_for_function("() => document.getElementById('result').textContent.includes('link')",
                               timeout=TIMEOUT_MS)
        assert bare.evaluate("() => sessionStorage.getItem('lumen-ex-token')") is None
    finally:
        context.close()


def json_text(value) -> str:
    import json

    return json.dumps(value)


# -- the page shows it: layout, the failing line, focus ------------------------------------------

SYNTAX_LINE = 9                     # the line of REFERENCE made unparseable below
BROKEN = "\n".join(line + ":" if i == SYNTAX_LINE - 1 else line
                   for i, line in enumerate(REFERENCE.split("\n")))


NARROW = 400                        # px: the narrow window's width
SCREENSHOTS = "LUMEN_EX_SCREENSHOTS"  # a folder: the layout tests save what they checked there (docs/screenshots/)


def screenshot(page, name: str) -> None:
    """Save the window as the test saw it, when LUMEN_EX_SCREENSHOTS names a folder."""
    folder = os.environ.get(SCREENSHOTS)
    if folder:
        page.screenshot(path=str(Path(folder) / f"{name}.png"))


def box(page, selector: str) -> dict:
    return page.evaluate(f"() => {{ const r = document.querySelector({json_text(selector)}).getBoundingClientRect();"
                         " return {top: r.top, bottom: r.bottom, left: r.left, right: r.right}; }")


@pytest.mark.slow
def test_the_verdict_the_first_failure_and_its_picture_fit_a_laptop_screen(laptop, served):
    replace_code(laptop, NO_SCALE)
    panel = check_and_wait(laptop, ctrl_enter(laptop))
    picture = panel.locator("section.first figure.picture img").first
    laptop.wait_for_function("(img) => img.complete && img.naturalWidth > 0", arg=picture.element_handle())
    assert laptop.evaluate("() => document.getElementById('result').scrollTop") == 0
    for selector in (".headline h2", "section.first h3", "section.first p.line.mistake", "section.first figure.picture img"):
        where = box(laptop, selector)
        assert 0 <= where["top"] and where["bottom"] <= 800 and where["right"] <= 1280, (selector, where)
    screenshot(laptop, "playground-failing-1280x800")


@pytest.mark.slow
def test_a_narrow_window_stacks_the_editor_check_and_the_result(narrow, served):
    replace_code(narrow, NO_SCALE)
    panel = check_and_wait(narrow, narrow.get_by_role("button", name="Check", exact=True).click)
    assert "Not yet" in panel.inner_text()
    assert narrow.evaluate("() => document.documentElement.scrollWidth") <= NARROW   # nothing off screen sideways
    check, editor, first = box(narrow, "#check"), box(narrow, "#editor"), box(narrow, "section.first")
    assert check["right"] <= NARROW and editor["right"] <= NARROW and first["right"] <= NARROW
    screenshot(narrow, f"playground-failing-{NARROW}px")
    assert check["bottom"] <= editor["top"] + 1 and editor["bottom"] <= first["top"]   # stacked in that order
    assert box(narrow, "#readme")["top"] >= first["bottom"]                           # the README below


@pytest.mark.slow
def test_the_failing_line_is_marked_in_the_editor_until_the_next_edit(page, served):
    replace_code(page, BROKEN)
    panel = check_and_wait(page, ctrl_enter(page))
    assert "does not parse" in panel.locator("section.first h3").inner_text()
    marked = page.locator(".cm-line.cm-failure-line")
    assert marked.count() == 1 and marked.inner_text() == BROKEN.split("\n")[SYNTAX_LINE - 1]
    assert page.locator(".cm-gutterElement.cm-failure-gutter").inner_text().strip() == str(SYNTAX_LINE)
    page.keyboard.press("Control+End")
    page.keyboard.type("# edited")
    assert page.locator(".cm-line.cm-failure-line").count() == 0                     # an edit clears it


@pytest.mark.slow
def test_keyboard_focus_is_visible(page, served):
    page.keyboard.press("Tab")                      # from the page's start: the first control
    outline = page.evaluate("() => { const s = getComputedStyle(document.activeElement);"
                            " return [s.outlineStyle, s.outlineWidth]; }")
    assert outline == ["solid", "2px"], outline

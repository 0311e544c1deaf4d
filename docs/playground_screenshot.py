"""Make docs/images/playground.png, the README's picture of `lumen-ex serve`, and the pictures of
exercise 13's generated text.

    .venv/bin/python docs/playground_screenshot.py               # docs/images/playground.png
    .venv/bin/python docs/playground_screenshot.py --tiny-model  # docs/images/tiny-model-{playground.png,terminal.svg}

A scratch workspace, the real server and sandbox, Debian's chromium through Playwright: exercise 1
with the output's last two axes swapped, checked, so the picture shows the shape-first panel. With
--tiny-model: exercise 13 with RoPE's positions restarting at 0 at every call, so the panel shows
the text the learner's model wrote under the reference's; and the same check in the terminal, saved
as an SVG by rich.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
LUMEN_EX = str(Path(sys.executable).parent / "lumen-ex")
REFERENCE = (ROOT / "src/lumen_ex/exercises/01-attention/reference.py").read_text()
BUGGY = REFERENCE.replace("return weights @ v, weights", "return (weights @ v).transpose(-2, -1), weights")
TINY = (ROOT / "src/lumen_ex/exercises/13-tiny-model/reference.py").read_text()
# RoPE at positions 0 .. L-1 at every call: the prompt is right, the text after it is not.
TINY_BUGGY = TINY.replace('H), positions, config["rope_base"])', 'H), torch.arange(L), config["rope_base"])').replace(
    'H_kv), positions, config["rope_base"])', 'H_kv), torch.arange(L), config["rope_base"])')


def terminal_svg(ws: Path, out: Path) -> None:
    """`lumen-ex check 13` as the terminal shows it, 100 columns wide, saved as an SVG."""
    import json

    from rich.console import Console

    from lumen_ex.cli.render import render_result
    from lumen_ex.core.results import RunResult

    done = subprocess.run([LUMEN_EX, "check", "13", "--seed", "7", "--format", "json"], cwd=ws, capture_output=True,
                          text=True, env={**__import__("os").environ, "LUMEN_EX_CHECK_SERVER": "off"})
    con = Console(record=True, width=100, file=open("/dev/null", "w"))
    render_result(con, RunResult.from_dict(json.loads(done.stdout)))
    out.write_text(con.export_svg(title="lumen-ex check 13"))


def main() -> None:
    tiny = "--tiny-model" in sys.argv[1:]
    ws = Path(tempfile.mkdtemp()) / "ws"
    subprocess.run([LUMEN_EX, "init", str(ws)], check=True, capture_output=True)
    (ws / "01-attention/attention.py").write_text(BUGGY)
    (ws / "13-tiny-model/tiny_model.py").write_text(TINY_BUGGY)
    if tiny:
        terminal_svg(ws, ROOT / "docs/images/tiny-model-terminal.svg")
    proc = subprocess.Popen([LUMEN_EX, "serve", "--no-browser", "--port", "0", "--workspace", str(ws), "--seed", "7"],
                            stdout=subprocess.PIPE, text=True)
    url = None
    for line in proc.stdout:   # the server prints its URL within seconds
        m = re.search(r"(http://\S+token=\S+)", line)
        if m:
            url = m.group(1)
            break
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                        args=["--no-sandbox", "--disable-background-networking"])
            page = browser.new_page(viewport={"width": 1440, "height": 900}, device_scale_factor=1)
            page.goto(url + ("&tiny-model" if tiny else "&attention"))   # the URL is .../#token=...: &slug opens one
            page.wait_for_selector("body[data-ready]")
            page.get_by_role("button", name="Check", exact=True).click()
            page.wait_for_selector("#result .headline", timeout=120_000)
            name = "tiny-model-playground.png" if tiny else "playground.png"
            page.screenshot(path=str(ROOT / "docs/images" / name), full_page=tiny)
            browser.close()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)


if __name__ == "__main__":
    main()

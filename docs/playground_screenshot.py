"""Make docs/images/playground.png, the README's picture of `lumen-ex serve`.

    .venv/bin/python docs/playground_screenshot.py

A scratch workspace, the real server and sandbox, Debian's chromium through Playwright: exercise 1
with the output's last two axes swapped, checked, so the picture shows the shape-first panel.
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


def main() -> None:
    ws = Path(tempfile.mkdtemp()) / "ws"
    subprocess.run([LUMEN_EX, "init", str(ws)], check=True, capture_output=True)
    (ws / "01-attention/attention.py").write_text(BUGGY)
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
            page.goto(url + "#attention")
            page.wait_for_selector("body[data-ready]")
            page.get_by_role("button", name="Check", exact=True).click()
            page.wait_for_selector("#result .headline", timeout=120_000)
            page.screenshot(path=str(ROOT / "docs/images/playground.png"))
            browser.close()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)


if __name__ == "__main__":
    main()

"""Terminal, document and spreadsheet injection: untrusted text is shown, never acted on, in every view.

Learner output, exception messages and submission names can hold terminal escape sequences (OSC 52
clipboard writes, screen clears, OSC 8 links, a carriage return that overwrites a line with a fake
"all tests passed"), C1 controls, bidirectional overrides, rich markup, Markdown and HTML, formulas
for a spreadsheet, and lone surrogates that no encoder accepts. src/lumen_ex/core/untrusted.py neutralises
them at the one place each view writes them. Here:

- each function of src/lumen_ex/core/untrusted.py against a battery of hostile strings (a Markdown parser
  and an HTML parser read the results back);
- each view (rich, json, junit, gradescope, github with its job summary and Classroom result,
  prairielearn, gradebook.csv, report.md) on a record whose every text field is hostile;
- end to end: a hostile submission graded for real by ``lumen-ex check`` in every format (bwrap,
  and docker where it runs), and ``lumen-ex grade`` on a class with hostile folder names, a
  lone-surrogate exception and a stored document holding one.
"""

from __future__ import annotations

import csv
import html.parser
import io
import json
import os
import re
import subprocess
import unicodedata
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import LUMEN_EX, requires_bwrap, workspace_with
from docker_support import docker_param
from markdown_it import MarkdownIt
from rich.console import Console

from lumen_ex.cli.render import render_result
from lumen_ex.core import catalog, untrusted
from lumen_ex.core.results import Diagnosis, RunResult, SandboxInfo, Status
from lumen_ex.core.results import TestResult as Case  # not "Test...": pytest would try to collect it

EX1 = catalog.load().find(1)
BACKENDS = [pytest.param("bwrap", marks=requires_bwrap, id="bwrap"), docker_param("docker")]

OSC52 = "\x1b]52;c;aGVsbG8=\x07"
HOSTILE = [
    OSC52,                                           # write the clipboard
    "\x1b[2J\x1b[H",                                 # clear the screen
    "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\",   # OSC 8 hyperlink
    "\r✓ all tests passed",                          # overwrite the line
    "\x9b2J \x9d0;title\x9c",                        # C1 CSI and OSC
    "\u202egnp.exe \u2066x\u2069 \u200b\ufeff",      # bidi override, isolate, zero-width, BOM
    "\ud800 and \udfff",                             # lone surrogates
    "[bold red]markup[/] [link=https://evil]x[/link]",
    "\r# heading\n## another\n- item\n1. item",
    "<script>alert(1)</script> <img src=x onerror=alert(1)> &amp; &#x1b;",
    "[click](https://evil.example) ![i](https://evil.example/p.png) [r]: https://evil.example",
    "*bold* _em_ `code` ~~s~~ $x$ | pipe \\ back",
    "=HYPERLINK(\"https://evil.example\",\"x\")",
    "a;=cmd", "x\n=1+1", "@SUM(1)", "+1", "-1", "a,-2", "x|=3", "y\t=4", " =5", "\uff1d6",
    "bell\x07 bs\x08 del\x7f nul\x00 vt\x0b ff\x0c",
    "\u2028line sep\u2029para sep \U000e0041\U000e0042 tag",
]
SAFE_IN_TEXT = {"\n", "\t", "\u200d"}        # kept by visible(): newline, tab, the emoji joiner


def unsafe_chars(text: str, allow: set[str] = SAFE_IN_TEXT) -> list[str]:
    """The characters of ``text`` a terminal or renderer would act on (not show)."""
    return [c for c in text if c not in allow and unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp")]


def no_raw_controls(data: bytes) -> None:
    """No ESC, BEL, CR, backspace, C1 (as UTF-8), bidi control or surrogate bytes in ``data``."""
    text = data.decode("utf-8")                       # also: the output is valid UTF-8
    bad = unsafe_chars(text)
    assert not bad, f"raw controls in the output: {sorted(set(map(hex, map(ord, bad))))}"


# -- the functions ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text", HOSTILE)
def test_visible_and_one_line_show_every_control(text):
    shown, line = untrusted.visible(text), untrusted.one_line(text)
    assert not unsafe_chars(shown) and not unsafe_chars(line, allow={"\u200d"})
    shown.encode("utf-8"), line.encode("utf-8")
    assert shown.count("\n") == text.count("\n") and "\n" not in line and "\t" not in line
    assert untrusted.visible(shown) == shown              # showing is idempotent


def test_visible_spelling():
    v = untrusted.visible
    assert v("\x1b[2J\x07\r\x00\x7f") == "␛[2J␇␍␀␡"
    assert v("\x9b\x85") == "\\x9b\\x85" and v("\u202e\u2066") == "\\u202e\\u2066"
    assert v("\ud800") == "\\ud800" and v("\U000e0041") == "\\U000e0041"
    assert v("plain text: ✓ résumé 注意 👩\u200d💻\n\tok") == "plain text: ✓ résumé 注意 👩\u200d💻\n\tok"
    assert untrusted.one_line("a\nb\tc\rd") == "a␤b␉c␍d"


def test_visible_covers_every_control_and_format_character():
    """The module's hard-coded character list agrees with this Python's Unicode database."""
    missed = [hex(cp) for cp in range(0x110000)
              if unicodedata.category(chr(cp)) in ("Cc", "Cf", "Cs", "Zl", "Zp") and chr(cp) not in SAFE_IN_TEXT
              and untrusted.visible(chr(cp)) == chr(cp)]
    assert not missed


def test_encodable():
    assert untrusted.encodable("a\ud800b\udfff") == "a\ufffdb\ufffd"
    assert untrusted.encodable("\U0001f600 ok") == "\U0001f600 ok"       # a real pair stays
    for text in HOSTILE:
        untrusted.encodable(text).encode("utf-8")


MD = MarkdownIt("commonmark").enable("table").enable("strikethrough")
MARKUP_TOKENS = {"heading_open", "link_open", "image", "html_inline", "html_block", "em_open", "strong_open",
                 "s_open", "code_inline", "bullet_list_open", "ordered_list_open", "blockquote_open", "hr",
                 "fence", "code_block"}


def md_tokens(doc: str) -> list:
    """Every token of ``doc``, inline children included."""
    out = []
    for t in MD.parse(doc):
        out.append(t)
        out += t.children or []
    return out


def md_text(tokens) -> str:
    return "".join(t.content for t in tokens if t.type == "text")


@pytest.mark.parametrize("text", HOSTILE)
def test_markdown_renders_as_the_literal_text(text):
    """In a paragraph, a heading, a quoted line and a table cell, markdown(text) is no markup of its
    own, and reads back as exactly the text (one line, controls shown)."""
    cell = untrusted.markdown(text)
    contexts = {"": set(), "### ": {"heading_open"}, "> ": {"blockquote_open"}}
    for prefix, expected in contexts.items():
        tokens = md_tokens(prefix + cell)
        assert {t.type for t in tokens} & MARKUP_TOKENS == expected, (prefix + cell, [t.type for t in tokens])
        assert md_text(tokens).strip() == untrusted.one_line(text).strip()
    table = MD.parse(f"| a | b |\n|---|---|\n| {cell} | x |\n")
    cells = [t for t in table if t.type == "inline"]
    assert len(cells) == 4 and md_text(cells[2].children).strip() == untrusted.one_line(text).strip()
    assert not {c.type for t in cells for c in t.children} & MARKUP_TOKENS


def test_markdown_keeps_test_names_readable():
    for name in ("causal_mask: bool, aligned bottom-right [square]", "output (..., L_q, d_v) [4d]",
                 "01-attention/attention.py", "each query's weights sum to 1"):
        assert untrusted.markdown(name) == name


@pytest.mark.parametrize("text", HOSTILE + ["a ` b `` c", "`", "x|y"])
def test_markdown_code_and_code_block(text):
    row = MD.parse(f"| a |\n|---|\n| {untrusted.markdown_code(text)} |\n")
    code = [c for t in row if t.type == "inline" for c in t.children if c.type == "code_inline"]
    assert len(code) == 1 and code[0].content.strip() == untrusted.one_line(text).strip()
    block = untrusted.code_block(text + "\n```\n````\n")
    fences = [t for t in MD.parse(block + "\n# after\n") if t.type == "fence"]
    assert len(fences) == 1 and fences[0].content == untrusted.visible(text + "\n```\n````\n") + "\n"


class _Tags(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)


@pytest.mark.parametrize("text", HOSTILE)
def test_html(text):
    import html as html_mod

    escaped = untrusted.html(text)
    parser = _Tags()
    parser.feed(f'<p title="{escaped}">{escaped}</p>')
    assert parser.tags == ["p"]
    assert html_mod.unescape(escaped) == untrusted.visible(text)


FORMULA = tuple(untrusted.FORMULA_START) + ("\t", "\r")


def assert_inert_cell(cell: str) -> None:
    """However a spreadsheet splits ``cell`` (comma, semicolon, pipe, tab, newline, or not at all),
    no piece starts a formula once its leading spaces are trimmed."""
    assert not unsafe_chars(cell, allow=set())
    for sep in (None, ",", ";", "|", "\t", "\n", "\r"):
        for piece in ([cell] if sep is None else cell.split(sep)):
            assert not piece.lstrip(" ").startswith(FORMULA), (cell, sep, piece)


@pytest.mark.parametrize("text", HOSTILE)
def test_csv_cell(text):
    cell = untrusted.csv_cell(text)
    assert_inert_cell(cell)
    buf = io.StringIO()
    csv.writer(buf).writerow([cell, "x"])
    assert next(csv.reader(io.StringIO(buf.getvalue()))) == [cell, "x"]


def test_csv_cell_spelling():
    c = untrusted.csv_cell
    assert c("=1+1") == "'=1+1" and c("a;=cmd") == "a;'=cmd" and c("x\n=1+1") == "x '=1+1"
    assert c("-1") == "'-1" and c("@SUM(1)") == "'@SUM(1)" and c("a -1") == "a -1" and c("alice") == "alice"


# -- each view, on a record whose every text is hostile -------------------------------------------

PAYLOAD = "".join(HOSTILE[:12])


def hostile_record() -> RunResult:
    shape = Diagnosis("shape", f"shape {PAYLOAD}", expected=[2, 3], got=[2, 4],
                      details={"expected_axes": ["L_q", "d_v"], "got_axes": ["\x1b[2J", "[bold]x[/]"],
                               "where": f"attention.py line 3 {OSC52}"})
    exc = Diagnosis("exception", f"your code raised ValueError: {PAYLOAD}", hint=f"try {PAYLOAD}",
                    misconception=f"no-scale{OSC52}", details={"line": 3})
    tests = [
        Case(f"t.py::a{OSC52}", f"name {PAYLOAD}", f"group{OSC52}\r# g", Status.FAIL, 0, 1,
                   message=exc.summary, diagnosis=exc, output=PAYLOAD + "\n````\n" + PAYLOAD),
        Case("t.py::b", f"shape {PAYLOAD}", "shapes", Status.FAIL, 0, 1, message=shape.summary,
                   diagnosis=shape, output=OSC52),
        Case("t.py::c", "ok", "contract", Status.PASS, 1, 1, output=PAYLOAD),
        # an error row is the first failure every view leads with (core/explaining.py explanatory_rank)
        Case("t.py::d", "err", "contract", Status.ERROR, 0, 1, message=PAYLOAD, output=PAYLOAD + "\n````\n" + PAYLOAD),
    ]
    return RunResult(exercise=EX1.summary(), status=Status.FAIL, sandbox=SandboxInfo("bwrap", False, note=PAYLOAD),
                     device=f"cpu{OSC52}", seed=7, score=1, max_score=4, duration=1.0, message=f"failed {PAYLOAD}",
                     tests=tests, versions={"torch": f"2{OSC52}"})


def test_rich_view_shows_markup_and_escapes_as_text():
    rec = hostile_record()
    for terminal in (False, True):
        buf = io.StringIO()
        con = Console(file=buf, width=160, force_terminal=terminal, color_system="truecolor" if terminal else None,
                      highlight=False, soft_wrap=False)
        render_result(con, rec)
        out = buf.getvalue()
        if terminal:          # rich's own colours are SGR sequences; nothing else may remain
            out = re.sub(r"\x1b\[[0-9;]*m", "", out)
        no_raw_controls(out.encode("utf-8"))
        assert "[bold red]markup[/]" in " ".join(out.split()) and "␛]52;c;aGVsbG8=␇" in out
        assert "\\ud800" in out and "\\u202e" in out


def test_json_view_keeps_the_text_and_is_ascii():
    from lumen_ex.feedback.formats import emit

    out = emit("json", hostile_record())
    assert out.isascii()
    assert json.loads(out)["tests"][0]["output"] == hostile_record().tests[0].output


def _strings(value, skip=("extra_data",)):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            if k not in skip:
                yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


@pytest.mark.parametrize("name", ["gradescope", "prairielearn"])
def test_lms_views_show_controls(name):
    from lumen_ex.feedback.formats import emit

    out = emit(name, hostile_record())
    assert out.isascii()
    for s in _strings(json.loads(out)):
        assert not unsafe_chars(s), (name, s)


def test_playground_view_carries_no_controls_and_keeps_markup_as_text():
    """The playground's view (src/lumen_ex/feedback/web.py): every string made harmless here; the page
    writes each with textContent (tests/e2e/test_playground_browser.py shows a <script> staying text)."""
    from lumen_ex.feedback.web import web_view

    view = web_view(hostile_record())
    strings = list(_strings(view))
    for text in strings:
        assert not unsafe_chars(text), text
    joined = " ".join(strings)
    assert "␛]52;c;aGVsbG8=␇" in joined and "[bold red]markup[/]" in " ".join(joined.split())
    # The shape diagram's axis names are cells of their own, escaped like the rest.
    shape = next(t for t in hostile_record().tests if t.diagnosis and t.diagnosis.kind == "shape")
    rec = hostile_record()
    rec.tests = [shape]
    cells = [c["text"] for line in web_view(rec)["first"]["lines"] if line["kind"] == "shape"
             for row in line["rows"] for c in row["cells"]]
    assert "␛[2J" in cells and "[bold]x[/]" in cells


def test_junit_view_parses_and_carries_no_controls():
    from lumen_ex.feedback.formats import emit

    out = emit("junit", hostile_record())
    no_raw_controls(out.encode("utf-8"))
    root = ET.fromstring(out)
    for el in root.iter():
        for s in [el.text or "", el.tail or "", *el.attrib.values()]:
            assert not unsafe_chars(s), s


def test_github_view_annotations_summary_and_runner_result(tmp_path):
    import base64

    from lumen_ex.feedback.formats import emit, github

    rec = hostile_record()
    summary, output = tmp_path / "summary.md", tmp_path / "output.txt"
    out = emit("github", rec, {"GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": str(output)})
    no_raw_controls(out.encode("utf-8"))
    for line in out.splitlines():
        assert line.startswith(("::group::", "::endgroup::", "::error ", "::warning ", "::notice ")) \
            or line[:1] in "✓✗!⏱-", line
        if line.startswith("::"):
            props = line[2:].split("::", 2)
            assert len(props) == 2 or line.startswith("::group::") or line == "::endgroup::", line
    md = summary.read_text(encoding="utf-8")
    no_raw_controls(md.encode("utf-8"))
    tokens = md_tokens(md)
    headings = [t for t in tokens if t.type == "heading_open"]
    assert len(headings) == 1 and headings[0].tag == "h3"
    assert not {t.type for t in tokens} & {"link_open", "image", "html_inline", "html_block"}
    assert sum(t.type == "fence" for t in tokens) == 1
    runner = json.loads(base64.b64decode(dict(line.split("=", 1) for line in output.read_text().splitlines())["result"]))
    for s in _strings(runner):
        assert not unsafe_chars(s), s
    assert github.escape_property("a::b,c\r\nd%") == "a%3A%3Ab%2Cc␍␤d%25"


def test_gradebook_and_report_views(tmp_path):
    from lumen_ex.classroom.outputs import write_outputs
    from lumen_ex.classroom.store import record

    students = ["\r# pwned", "=cmd|' ;C calc'!A0", "+1;-2", "plain"]
    for student in students:
        rec = hostile_record()
        rec.status = Status.ERROR if student == "plain" else Status.FAIL
        record(tmp_path, student, EX1, rec)
    report = write_outputs(tmp_path, students, [EX1], "class\r# title <b>", ("junit", "github"))
    assert len(report.rows) == 4
    rows = list(csv.reader(io.StringIO((tmp_path / "gradebook.csv").read_text(encoding="utf-8"))))
    assert len(rows) == 5
    for row in rows[1:]:
        for cell in row:
            assert_inert_cell(cell)
    check_report(tmp_path / "report.md")


def check_report(path: Path) -> str:
    """report.md has exactly the headings lumen-ex writes, and no link, image or HTML."""
    text = path.read_text(encoding="utf-8")
    no_raw_controls(text.encode("utf-8"))
    tokens = md_tokens(text)
    headings = [md_text(tokens[i + 1].children) for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings[1:7] == ["Scores", "Distribution of totals", "Most frequent misconceptions",
                             "Pass rate per test", f"{EX1.number} {EX1.slug}", "Checks that need a look"], headings
    assert headings[7:] in ([], ["Entries that were not graded"]), headings
    assert headings[0].startswith("Class report: ")
    assert not {t.type for t in tokens} & {"link_open", "image", "html_inline", "html_block"}
    return text


# -- end to end ------------------------------------------------------------------------------------

SUBMISSION = r'''
import torch
print("\x1b]52;c;aGVsbG8=\x07 \x1b[2J\x1b[H \x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\")
print("\r✓ all tests passed \x9b2J \u202egnp.exe [bold red]markup[/] <script>x</script>")

def scaled_dot_product_attention(q, k, v, mask=None):
    print("\x1b[2J\r✓ all tests passed [bold]b[/]\x07")
    raise ValueError("\ud800 \x1b]52;c;aGk=\x07 \r✓ all tests passed \x9b2J [bold red]x[/] \u202e\n::error::forged")

def causal_mask(L_q, L_k=None, device=None):
    raise ValueError("\udfff \x1b[2J\x1b[H\r# heading")
'''


def cli_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FORCE_COLOR", "NO_COLOR", "GITHUB_"))}
    env.update({"COLUMNS": "120", **extra})
    return env


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.slow
def test_check_every_format_with_a_hostile_submission(backend, tmp_path):
    """The real CLI, grading for real: no crash (exit 1, not 3) and no raw control in any output."""
    ws = workspace_with(tmp_path, 1, SUBMISSION)
    summary = tmp_path / "summary.md"
    runs = {
        "rich": cli_env(FORCE_COLOR="1", TERM="xterm-256color"),
        "github": cli_env(GITHUB_STEP_SUMMARY=str(summary), GITHUB_OUTPUT=str(tmp_path / "output.txt")),
        "junit": cli_env(), "json": cli_env(),
    }
    outputs = {}
    for fmt, env in runs.items():
        proc = subprocess.run([LUMEN_EX, "check", "1", "--workspace", str(ws), "--sandbox", backend, "--format", fmt,
                               "--seed", "3"], env=env, capture_output=True, timeout=300)
        assert proc.returncode == 1, (fmt, proc.stdout[-2000:], proc.stderr[-2000:])
        out = proc.stdout
        if fmt == "rich":
            out = re.sub(rb"\x1b\[[0-9;]*m", b"", out)           # rich's own colours
        no_raw_controls(out)
        no_raw_controls(proc.stderr)
        outputs[fmt] = out.decode("utf-8")
    assert "␛]52;c;aGk=␇" in outputs["rich"] and "[bold red]x[/]" in outputs["rich"]
    assert not any(line.startswith("::error::forged") for line in outputs["github"].splitlines())
    md = summary.read_text(encoding="utf-8")
    no_raw_controls(md.encode("utf-8"))
    assert [t.tag for t in md_tokens(md) if t.type == "heading_open"] == ["h3"]
    ET.fromstring(outputs["junit"])
    doc = json.loads(outputs["json"])
    assert doc["status"] == "fail" and outputs["json"].isascii()
    assert "\x1b]52;c;aGk=\x07" in doc["tests"][1]["message"]        # the record keeps the original


@requires_bwrap
@pytest.mark.slow
def test_grade_a_class_with_hostile_names_and_messages(tmp_path):
    """`lumen-ex grade`: hostile folder and zip names, a lone-surrogate exception, and a stored
    document holding one; gradebook.csv and report.md are written for the whole class."""
    from helpers.classes import grade

    from lumen_ex.classroom.store import record

    subs = tmp_path / "submissions"
    subs.mkdir()
    pwned = subs / "\r# pwned"
    pwned.mkdir()
    (pwned / EX1.file).write_text(SUBMISSION)
    formula = subs / "@SUM(1+1)|=cmd|' -C calc'!A0"         # kept as @SUM_1+1__cmd...: starts a formula
    formula.mkdir()
    (formula / EX1.file).write_text((EX1.reference_path).read_text())
    (subs / "bad\r# zip <b>.zip").write_bytes(b"not a zip \x1b[2J")        # refused, its name in the message
    stored = subs / "stored"
    stored.mkdir()
    (stored / EX1.file).write_text("")
    open(os.fsencode(subs) + b"/notes\xff\x1b]52;c;aGk=\x07.txt", "w").close()   # ignored, with a note
    out = tmp_path / "out"
    rec = hostile_record()
    rec.tests[0].message = rec.tests[0].diagnosis.summary = "\ud800 =1+1;=cmd \r# stored heading"
    rec.status, rec.message = Status.ERROR, f"\ud800 {PAYLOAD}"      # listed under "needs a look"
    record(out, "stored", EX1, rec)                 # graded already: kept, and read back by the gradebook
    proc = grade([str(subs), "-e", "1", "--out", str(out), "--jobs", "2", "--sandbox", "bwrap", "--seed", "5"],
                 tmp_path)
    # The stored grader error is graded again (a rerun retries errors: tests/e2e/test_grade_rerun.py),
    # and its hostile message is shown, neutralised, in the "regrading ... because" line.
    assert proc.returncode == 0, proc.stdout + proc.stderr      # graded, no grader error left
    said = proc.stdout + proc.stderr
    assert "regrading stored" in said and "␛]52;c;" in said, said
    no_raw_controls(proc.stdout.encode("utf-8", "surrogateescape"))
    no_raw_controls(proc.stderr.encode("utf-8", "surrogateescape"))
    assert (out / "gradebook.csv").exists(), proc.stdout + proc.stderr
    rows = list(csv.DictReader(io.StringIO((out / "gradebook.csv").read_text(encoding="utf-8"))))
    formula_name = "@SUM_1+1___cmd___-C_calc__A0"
    by = {r["key"]: r for r in rows}        # names are kept as given (neutralised); keys are safe
    skipped = {k for k, r in by.items() if r["status"] == "skipped"}
    assert len(skipped) == 1 and next(iter(skipped)).startswith("notes"), by   # the .txt, with its reason
    assert set(by) - skipped == {"___pwned", "'" + formula_name, "bad___zip__b_", "stored"}, set(by)
    assert by["___pwned"]["student"] == "# pwned"            # the CR is gone from the cell: no new row
    for row in rows:
        for cell in row.values():
            assert_inert_cell(cell)
    assert by["'" + formula_name]["status"] == "pass" and by["___pwned"]["status"] == "fail"
    assert by["bad___zip__b_"]["status"] in ("fail", "error") and by["stored"]["status"] == "fail"
    check_report(out / "report.md")

"""Every output format through the real entry point (`lumen-ex check N --format F`), parsed back and
checked field by field against the record it views and the published field lists.

For each submission, one `--format json` run gives the record; each format is then produced by its
own run with the same seed, in one workspace whose check server answers all but the first run
(tests/helpers/cli.py ``WarmWorkspace``; a warm check's record is a cold one's: tests/e2e/test_check_server.py) (same seed, same verdicts: tests/e2e/test_cli.py::test_same_seed_same_record),
parsed, validated against its schema in tests/schemas/ (written from the platforms' field lists, docs/classroom.md Output formats, or, for
JUnit, the XSD pytest conforms to), and compared with the record test by test: a writer may never
re-derive a status or a score.
"""

from __future__ import annotations

import base64
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import CORPORA, REFERENCES, ROOT, best_sandbox
from helpers.cli import WarmWorkspace

from lumen_ex.core import catalog
from lumen_ex.core.results import RunResult, points
from lumen_ex.feedback import formats

jsonschema = pytest.importorskip("jsonschema")

SCHEMAS = Path(__file__).parents[1] / "schemas"
SEED = "7"
NO_SCALE = CORPORA["attention"] / "buggy" / "no_scale.py"
SYNTAX_ERROR = "import torch\n\ndef scaled_dot_product_attention(q, k, v, mask=None)\n    return q, q\n"
# An exception message that tries to start workflow commands of its own in the GitHub log.
INJECTION = '''
import torch

def scaled_dot_product_attention(q, k, v, mask=None):
    raise RuntimeError("boom\\n::error::forged by the submission\\n::add-mask::x %0A")

def causal_mask(L_q, L_k=None, device=None):
    raise RuntimeError("boom\\n::notice title=Points 10/10::forged")
'''
EX1 = catalog.load().find(1)


def schema(name: str) -> dict:
    return json.loads((SCHEMAS / name).read_text())


class Checked:
    """One submission, checked once per format with the same seed, in the session's one warm
    workspace (tests/helpers/cli.py ``warm_workspace``): its file is put back before each check,
    and the workspace's check server answers every check but the session's first."""

    def __init__(self, warm: WarmWorkspace, source: str | Path):
        self.warm, self.ws = warm, warm.root
        self.source = source.read_text() if isinstance(source, Path) else source
        self.sandbox = best_sandbox()
        self._json = None

    @property
    def json_stdout(self) -> str:
        if self._json is None:
            self._json = self.check("json").stdout
        return self._json

    @property
    def record(self) -> RunResult:
        return RunResult.from_dict(json.loads(self.json_stdout))

    def check(self, fmt: str, env: dict | None = None):
        self.warm.put(self.source)
        proc = self.warm.run(["check", "1", "--sandbox", self.sandbox, "--seed", SEED, "--format", fmt], self.ws, env)
        assert proc.returncode in (0, 1), proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr
        return proc


@pytest.fixture(scope="module")
def buggy(warm_workspace):
    return Checked(warm_workspace, NO_SCALE)


@pytest.fixture(scope="module")
def correct(warm_workspace):
    return Checked(warm_workspace, REFERENCES["attention"])


def test_the_cli_offers_every_format():
    from lumen_ex.cli.main import CHECK_FORMATS

    assert CHECK_FORMATS == ("rich", *formats.NAMES)
    assert formats.NAMES == ("json", "junit", "gradescope", "github", "prairielearn")


def test_the_cli_choices_are_the_library_s():
    from lumen_ex.core import options as choices
    from lumen_ex.harness.check import DEVICES
    from lumen_ex.sandbox.select import CHOICES

    assert choices.FORMATS == formats.NAMES
    assert choices.SANDBOXES == CHOICES and choices.DEVICES == DEVICES


@pytest.mark.slow
def test_the_record_has_what_the_views_need(buggy):
    """The buggy submission exercises every status a view must map: pass, fail, skipped."""
    statuses = {t.status.value for t in buggy.record.tests}
    assert {"pass", "fail", "skipped"} <= statuses
    assert any(t.diagnosis and t.diagnosis.misconception == "no-scale" for t in buggy.record.tests)


# -- Gradescope ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_gradescope(buggy):
    proc = buggy.check("gradescope")
    doc = json.loads(proc.stdout)
    jsonschema.validate(doc, schema("gradescope-results.schema.json"))
    rec = buggy.record
    assert proc.returncode == rec.exit_code() == 1
    assert doc["score"] == pytest.approx(rec.score, abs=1e-4)
    assert isinstance(doc["execution_time"], (int, float)) and doc["execution_time"] > 0
    assert rec.message in doc["output"] and f"seed {rec.seed}" in doc["output"]
    assert doc["visibility"] == "visible" and doc["stdout_visibility"] == "hidden"
    assert len(doc["tests"]) == len(rec.tests)
    for i, (g, t) in enumerate(zip(doc["tests"], rec.tests), 1):
        skipped = t.status.value == "skipped"       # marked as skipped (src/lumen_ex/feedback/formats/gradescope.py)
        assert g["name"] == f"{t.group}: {t.name}" + (" (skipped)" if skipped else "")
        assert g["number"] == f"1.{i}"
        assert g["score"] == pytest.approx(t.score) and g["max_score"] == pytest.approx(t.max_score)
        assert g["visibility"] == "visible" and g["tags"] == [t.group] + (["skipped"] if skipped else [])
        assert g["extra_data"]["id"] == t.id and g["extra_data"]["status"] == t.status.value
        if t.status.value == "skipped":
            assert "status" not in g and g["max_score"] == 0 and g["output"].startswith("skipped")
        else:
            assert g["status"] == ("passed" if t.status.value == "pass" else "failed")
        if t.status.value == "fail":
            assert t.diagnosis.summary in g["output"]
            if t.diagnosis.misconception:
                assert f"likely mistake ({t.diagnosis.misconception})" in g["output"]
        if t.status.value == "pass":
            assert g["output"] == ""
    assert sum(g["score"] for g in doc["tests"]) == pytest.approx(doc["score"], abs=1e-3)


# -- PrairieLearn ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_prairielearn(buggy):
    doc = json.loads(buggy.check("prairielearn").stdout)
    jsonschema.validate(doc, schema("prairielearn-results.schema.json"))
    rec = buggy.record
    assert doc["gradable"] is True and "format_errors" not in doc
    assert doc["score"] == pytest.approx(rec.score / rec.max_score, abs=1e-5)
    assert doc["message"] == rec.message
    assert len(doc["tests"]) == len(rec.tests)
    for p, t in zip(doc["tests"], rec.tests):
        # points and max_points on every test, or PrairieLearn hides the per-test points of all
        assert set(p) - {"images"} == {"name", "description", "points", "max_points", "message", "output"}
        assert p["name"] == t.name and t.id in p["description"] and t.group in p["description"]
        assert p["points"] == pytest.approx(t.score) and p["max_points"] == pytest.approx(t.max_score)
        assert (p["message"] == "") == (t.status.value == "pass")
        if t.status.value == "fail":
            assert p["message"].startswith(f"{t.diagnosis.kind}: {t.diagnosis.summary}")


# -- JUnit XML -------------------------------------------------------------------------------------


def junit_rules() -> dict:
    """element -> (attributes {name: required}, allowed children, text only?, numeric attribute patterns),
    from tests/schemas/junit-structure.json (written from pytest's junitxml output)."""
    spec = json.loads((SCHEMAS / "junit-structure.json").read_text())
    rules = {}
    for name, el in spec["elements"].items():
        attrs = el.get("attributes", {})
        types = {a: spec["numeric"][a] for a in attrs if a in spec["numeric"]}
        rules[name] = (attrs, set(el.get("children", [])), bool(el.get("text")), types)
    return rules


def validate_xml(element: ET.Element, rules: dict) -> None:
    assert element.tag in rules, f"<{element.tag}> is not in the schema"
    attrs, children, text_only, types = rules[element.tag]
    assert set(element.attrib) <= set(attrs), f"<{element.tag}> has attributes {set(element.attrib) - set(attrs)}"
    missing = {a for a, required in attrs.items() if required} - set(element.attrib)
    assert not missing, f"<{element.tag}> lacks {missing}"
    for name, pattern in types.items():
        if name in element.attrib:
            assert re.fullmatch(pattern, element.attrib[name]), f"{element.tag}@{name}={element.attrib[name]}"
    if text_only:
        assert len(element) == 0
    for child in element:
        assert child.tag in children, f"<{child.tag}> may not be inside <{element.tag}>"
        validate_xml(child, rules)


@pytest.mark.slow
def test_junit(buggy):
    text = buggy.check("junit").stdout
    assert text.startswith('<?xml version="1.0" encoding="utf-8"?>')
    root = ET.fromstring(text)
    assert root.tag == "testsuites"
    validate_xml(root, junit_rules())
    rec = buggy.record
    (suite,) = root.findall("testsuite")
    by = lambda s: sum(t.status.value in s for t in rec.tests)  # noqa: E731
    assert suite.get("name") == "lumen-ex.attention"
    assert (int(suite.get("tests")), int(suite.get("failures")), int(suite.get("errors")), int(suite.get("skipped"))) == (
        len(rec.tests), by(("fail",)), by(("error", "timeout")), by(("skipped",)))
    assert root.get("tests") == suite.get("tests") and root.get("failures") == suite.get("failures")
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["seed"] == SEED and props["status"] == rec.status.value and props["sandbox"] == rec.sandbox.backend
    assert float(props["score"]) == pytest.approx(rec.score, abs=0.01)
    cases = suite.findall("testcase")
    assert len(cases) == len(rec.tests)
    for case, t in zip(cases, rec.tests):
        assert case.get("classname") == f"lumen-ex.attention.{t.group}" and case.get("name") == t.name
        kinds = [c.tag for c in case if c.tag != "system-out"]
        expected = {"pass": [], "fail": ["failure"], "error": ["error"], "timeout": ["error"], "skipped": ["skipped"]}
        assert kinds == expected[t.status.value]
        if t.status.value == "fail":
            failure = case.find("failure")
            assert failure.get("message") == t.diagnosis.summary and failure.get("type") == t.diagnosis.kind
            assert t.id in failure.text
        assert (case.find("system-out") is not None) == bool(t.output.strip())


def test_junit_escapes_what_xml_cannot_carry():
    """Control characters from learner output become #xNN, so the file still parses."""
    from lumen_ex.feedback.formats import junit

    rec = _record_with_output("bell\x07 and nul\x00 and esc\x1b[31m")
    root = ET.fromstring(junit.render(rec))
    out = root.find("testsuite/testcase/system-out").text
    assert "#x07" in out and "#x00" in out and "#x1B" in out


def _record_with_output(text: str) -> RunResult:
    from lumen_ex.core.results import SandboxInfo, Status, TestResult

    return RunResult(exercise=EX1.summary(), status=Status.PASS, sandbox=SandboxInfo("bwrap", True), device="cpu",
                     seed=1, score=1, max_score=1, message="all tests passed",
                     tests=[TestResult("t.py::test_a", "a", "contract", Status.PASS, 1, 1, output=text)])


# -- GitHub ----------------------------------------------------------------------------------------


def github_run(checked: Checked, tmp: Path):
    summary, output = tmp / "summary.md", tmp / "output.txt"
    summary.write_text("# earlier steps\n")
    proc = checked.check("github", {"GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": str(output),
                                    "GITHUB_ACTIONS": "true"})
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    return proc, summary.read_text(), outputs


def unescape(text: str) -> str:
    return text.replace("%0A", "\n").replace("%0D", "\r").replace("%3A", ":").replace("%2C", ",").replace("%25", "%")


COMMAND = re.compile(r"^::(\w+)(?: ([^:]*))?::(.*)$")


def commands(stdout: str) -> list[tuple[str, dict, str]]:
    out = []
    for line in stdout.splitlines():
        m = COMMAND.match(line)
        if m:
            props = dict(p.split("=", 1) for p in m.group(2).split(",")) if m.group(2) else {}
            out.append((m.group(1), {k: unescape(v) for k, v in props.items()}, unescape(m.group(3))))
    return out


@pytest.mark.slow
def test_github_annotations_summary_and_classroom_result(buggy, tmp_path):
    proc, summary, outputs = github_run(buggy, tmp_path)
    rec = buggy.record
    assert proc.returncode == 1
    cmds = commands(proc.stdout)
    assert cmds[0][0] == "group" and ("endgroup", {}, "") in cmds
    failing = [t for t in rec.tests if t.status.value not in ("pass", "skipped")]
    errors = [c for c in cmds if c[0] == "error"]
    # one annotation per distinct failure: tests failing the same way at the same line share one
    assert 1 <= len(errors) <= 10 and len({(c[1].get("line"), c[2]) for c in errors}) == len(errors)
    by_title = {f"lumen-ex check 1 (attention): {t.group}: {t.name}": t for t in failing}
    covered = 0
    for _, props, message in errors:
        assert props["file"] == EX1.path
        more = re.search(r" \(and (\d+) more tests that fail the same way\)$", props["title"])
        t = by_title[props["title"][:more.start()] if more else props["title"]]
        covered += 1 + (int(more.group(1)) if more else 0)
        assert message.startswith(f"{t.diagnosis.kind}: {t.diagnosis.summary}")
    warned = [c for c in cmds if c[0] == "warning"]
    assert covered == len(failing) or (warned and covered + int(warned[0][2].split()[0]) == len(failing))
    notice = [c for c in cmds if c[0] == "notice"]
    assert len(notice) == 1 and notice[0][1]["title"].endswith(f"Points {points(rec.score)}/10")
    # every log line is either a workflow command or starts with a test's mark
    for line in proc.stdout.splitlines():
        assert line.startswith("::") or line[:1] in "✓✗!⏱-", line

    # the job summary is appended, not overwritten
    assert summary.startswith("# earlier steps\n")
    assert f"### ❌ lumen-ex check 1 · Scaled dot-product attention: {points(rec.score)} / 10 points" in summary
    rows = [line for line in summary.splitlines() if line.startswith("| ") and not line.startswith("| |")]
    assert len(rows) == len(rec.tests)
    assert "likely mistake (no-scale)" in summary

    # the GitHub Classroom runner result, as the reporter action decodes it
    runner = json.loads(base64.b64decode(outputs["result"]))
    jsonschema.validate(runner, schema("github-classroom-runner.schema.json"))
    counted = [t for t in rec.tests if t.status.value != "skipped"]
    assert runner["status"] == "fail" and runner["max_score"] == 10
    assert len(runner["tests"]) == len(counted)
    for r, t in zip(runner["tests"], counted):
        assert r["name"] == f"{t.group}: {t.name}" and r["filename"] == EX1.path
        assert r["status"] == {"pass": "pass", "fail": "fail"}.get(t.status.value, "error")
        assert r["score"] == pytest.approx(t.score, abs=1e-4)
        assert r["test_code"].startswith(f"lumen-ex check 1 --seed {SEED}") and t.id in r["test_code"]
    assert sum(r["score"] for r in runner["tests"]) == pytest.approx(rec.score, abs=1e-3)
    assert outputs["score"] == points(rec.score) and outputs["max_score"] == "10"


@pytest.mark.slow
def test_github_annotation_points_at_the_line(warm_workspace, tmp_path):
    """A file that does not parse: the annotation carries the line of the syntax error."""
    checked = Checked(warm_workspace, SYNTAX_ERROR)
    proc, _, _ = github_run(checked, tmp_path)
    errors = [c for c in commands(proc.stdout) if c[0] == "error"]
    assert errors and all(c[1]["file"] == EX1.path and c[1]["line"] == "3" for c in errors)
    assert errors[0][2].startswith("import: your file does not parse")
    # one syntax error is one annotation (not all ten of GitHub's slots), counting the tests it failed
    failed = sum(t.status.value not in ("pass", "skipped") for t in checked.record.tests)
    assert len(errors) == 1 and errors[0][1]["title"].endswith(f"(and {failed - 1} more tests that fail the same way)")


@pytest.mark.slow
def test_github_output_cannot_be_forged_by_the_submission(warm_workspace, tmp_path):
    checked = Checked(warm_workspace, INJECTION)
    proc, summary, outputs = github_run(checked, tmp_path)
    lines = proc.stdout.splitlines()
    assert not any("forged" in line and not line.startswith(("::error ", "✗", "!")) for line in lines)
    assert not any(line.startswith(("::error::forged", "::add-mask::", "::notice title=Points 10/10"))
                   for line in lines)
    assert "%0A::error::forged" in proc.stdout       # escaped inside our own annotation instead
    notices = [c for c in commands(proc.stdout) if c[0] == "notice"]
    from lumen_ex.feedback.text import points

    assert len(notices) == 1 and notices[0][1]["title"].endswith(f"Points {points(checked.record.score)}/10")
    assert json.loads(base64.b64decode(outputs["result"]))["status"] == "fail"


@pytest.mark.slow
def test_github_correct_submission(correct, tmp_path):
    proc, summary, outputs = github_run(correct, tmp_path)
    assert proc.returncode == 0
    cmds = commands(proc.stdout)
    assert not [c for c in cmds if c[0] in ("error", "warning")]
    assert [c[1]["title"] for c in cmds if c[0] == "notice"] == ["lumen-ex check 1 (attention): Points 10/10"]
    assert "### ✅" in summary
    runner = json.loads(base64.b64decode(outputs["result"]))
    assert runner["status"] == "pass" and all(t["status"] == "pass" for t in runner["tests"])


@pytest.mark.slow
def test_json_format_is_unchanged(correct):
    """`--format json` still prints the record exactly as RunResult.to_json does."""
    doc = json.loads(correct.json_stdout)
    assert correct.json_stdout == json.dumps(doc, indent=2) + "\n"
    jsonschema.validate(doc, json.loads((ROOT / "docs" / "result.schema.json").read_text()))


# -- a record the grader could not finish (views are pure: fed the record directly) -----------------


def grader_error() -> RunResult:
    from lumen_ex.core.results import Diagnosis, SandboxInfo, Status, TestResult

    msg = "test groups not in the catalogue: extra"
    return RunResult(exercise=EX1.summary(), status=Status.ERROR, sandbox=SandboxInfo("bwrap", True), device="cpu",
                     seed=3, score=2.0, max_score=10.0, message=msg, tests=[
                         TestResult("t.py::test_a", "a", "contract", Status.PASS, 2, 2),
                         TestResult("grader", "the hidden suite loaded", "grader", Status.ERROR, message=msg,
                                    diagnosis=Diagnosis("grader", msg))])


def test_views_of_a_grader_error():
    rec = grader_error()
    gs = json.loads(formats.get("gradescope").render(rec))
    jsonschema.validate(gs, schema("gradescope-results.schema.json"))
    assert gs["score"] == 2.0 and "was not graded" in gs["output"]
    pl = json.loads(formats.get("prairielearn").render(rec))
    jsonschema.validate(pl, schema("prairielearn-results.schema.json"))
    assert pl["gradable"] is False and pl["score"] == 0.0 and rec.message in pl["format_errors"][0]
    root = ET.fromstring(formats.get("junit").render(rec))
    validate_xml(root, junit_rules())
    assert root.find("testsuite").get("errors") == "1"
    gh = commands(formats.get("github").render(rec))
    errors = [c for c in gh if c[0] == "error"]
    assert len(errors) == 1 and "file" not in errors[0][1] and "the grader could not finish" in errors[0][1]["title"]
    from lumen_ex.feedback.formats.github import classroom_result

    assert classroom_result(rec)["status"] == "error"


def test_unknown_format_is_a_usage_error():
    from lumen_ex.core.errors import UsageError

    with pytest.raises(UsageError, match="unknown format 'csv'"):
        formats.get("csv")

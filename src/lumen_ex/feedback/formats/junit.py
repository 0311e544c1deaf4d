"""JUnit XML (the shape pytest writes; jenkinsci/xunit-plugin junit-10.xsd; docs/classroom.md, Output formats).

One ``<testsuite>`` per check, named ``lumen-ex.<slug>``, inside ``<testsuites>``, with the counts
``tests``, ``failures`` (status fail), ``errors`` (status error or timeout), ``skipped`` and ``time``,
and ``<properties>`` for the seed, the sandbox, the device and the score. Each test is a
``<testcase>`` with ``classname`` ``lumen-ex.<slug>.<group>``, ``name`` (what the learner sees) and
``time``; a failure holds ``<failure type="<diagnosis kind>" message="<summary>">`` with the whole
explanation as text, an error or timeout an ``<error>``, a skipped test ``<skipped message=...>``,
and what the learner's code printed goes in ``<system-out>``. Characters XML cannot carry (most
C0 controls, lone surrogates) are written as ``#xNN``, as pytest does; the other controls and
invisible characters that a terminal or a report page would act on are shown as
src/lumen_ex/core/untrusted.py shows them (:func:`clean`), in every attribute and text.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from lumen_ex.core.results import RunResult, Status, TestResult
from lumen_ex.core.untrusted import visible
from lumen_ex.feedback.text import explain, points

_ILLEGAL = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def clean(text: str) -> str:
    """``text`` as XML can carry it and a reader sees it: ``#xNN`` for what XML forbids, then
    the remaining controls (CR, C1) and invisible characters shown (untrusted.visible)."""
    return visible(_ILLEGAL.sub(lambda m: f"#x{ord(m.group()):02X}", str(text)))


def _seconds(x: float) -> str:
    return f"{max(x, 0.0):.3f}"


def element(result: RunResult) -> ET.Element:
    slug = result.exercise["slug"]
    counts = {
        "tests": len(result.tests),
        "failures": sum(t.status is Status.FAIL for t in result.tests),
        "errors": sum(t.status in (Status.ERROR, Status.TIMEOUT) for t in result.tests),
        "skipped": sum(t.status is Status.SKIPPED for t in result.tests),
    }
    root = ET.Element("testsuites", {"name": "lumen-ex", "tests": str(counts["tests"]),
                                     "failures": str(counts["failures"]), "errors": str(counts["errors"]),
                                     "time": _seconds(result.duration)})
    suite = ET.SubElement(root, "testsuite", {"name": f"lumen-ex.{slug}", **{k: str(v) for k, v in counts.items()},
                                              "time": _seconds(result.duration)})
    props = ET.SubElement(suite, "properties")
    for name, value in (("exercise", str(result.exercise["number"])), ("title", result.exercise["title"]),
                        ("status", result.status.value), ("message", result.message),
                        ("score", points(result.score)), ("max_score", points(result.max_score)),
                        ("seed", str(result.seed)), ("device", result.device),
                        ("sandbox", result.sandbox.backend), ("isolated", str(result.sandbox.isolated).lower()),
                        *((f"version.{k}", v) for k, v in sorted(result.versions.items()))):
        ET.SubElement(props, "property", {"name": clean(name), "value": clean(value)})
    for t in result.tests:
        suite.append(_case(slug, t))
    return root


def _case(slug: str, t: TestResult) -> ET.Element:
    case = ET.Element("testcase", {"classname": clean(f"lumen-ex.{slug}.{t.group}"), "name": clean(t.name),
                                   "time": _seconds(t.duration)})
    summary = clean(t.diagnosis.summary if t.diagnosis else (t.message or t.status.value))
    kind = clean(t.diagnosis.kind if t.diagnosis else t.status.value)
    if t.status is Status.FAIL:
        child = ET.SubElement(case, "failure", {"type": kind, "message": summary})
    elif t.status in (Status.ERROR, Status.TIMEOUT):
        child = ET.SubElement(case, "error", {"type": kind, "message": summary})
    elif t.status is Status.SKIPPED:
        child = ET.SubElement(case, "skipped", {"type": "lumen-ex.skip", "message": clean(t.message or "skipped")})
    else:
        child = None
    if child is not None and t.status is not Status.SKIPPED:
        child.text = clean(f"{t.id}\n{explain(t, with_output=False)}")
    if t.output.strip():
        ET.SubElement(case, "system-out").text = clean(t.output)
    return case


def render(result: RunResult) -> str:
    root = element(result)
    ET.indent(root, space="  ")
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"

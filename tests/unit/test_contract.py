"""The pieces that make the contract checkable and the explanations right, tested directly.

The hidden suites' coverage of the contract is mapped in docs/contract-coverage.md and proven by
the corpus (tests/e2e/test_corpus.py); here: the meta device crosses the pipe as a verified fact
(src/lumen_ex/sandbox/inside/wire.py, src/lumen_ex/harness/proxy.py), the run names a likely mistake only when it explains most of
the failing value tests (src/lumen_ex/core/results.py), value diffs show the digits that differ, and a
float32 result is traced to the line of the graded file that made it (src/lumen_ex/graders/support/expect.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from lumen_ex.core.results import Diagnosis, Status, summarise_misconceptions
from lumen_ex.core.results import TestResult as Result  # not collected as a test class
from lumen_ex.graders.support import expect
from lumen_ex.harness.proxy import _annotator
from lumen_ex.sandbox.inside import wire, wire_decode

ROOT = Path(__file__).resolve().parents[2]


# -------------------------------------------------------------------------------------------------
# The meta device through the pipe


def _round_trip(header: dict, tensors: list[torch.Tensor]) -> tuple[dict, list[torch.Tensor]]:
    parser = wire.FrameParser()
    parser.feed(wire.encode_frame(header, tensors))
    frame = parser.next_frame()
    assert frame is not None
    return frame


def test_a_meta_tensor_crosses_the_pipe_as_shape_and_dtype():
    t = torch.empty(3, 5, dtype=torch.bool, device="meta")
    header, tensors = _round_trip({"id": 2}, [t, torch.ones(2)])
    assert header["tensors"][0] == {"dtype": "bool", "shape": [3, 5], "nbytes": 0, "device": "meta"}
    assert tensors[0].is_meta and tensors[0].shape == (3, 5) and tensors[0].dtype == torch.bool
    assert not tensors[1].is_meta and torch.equal(tensors[1], torch.ones(2))   # the next one's bytes intact


def test_a_meta_spec_carries_no_bytes():
    spec = {"dtype": "float32", "shape": [2], "nbytes": 8, "device": "meta"}
    with pytest.raises(wire.ProtocolError):
        wire_decode._check_spec(spec)


def test_a_meta_device_tag_is_checked_against_the_data():
    """A tensor tagged meta must have arrived without data, and one without data must be tagged meta."""
    annotate = _annotator(frozenset({"cpu", "meta"}))
    assert annotate(torch.empty(2, device="meta"), {"device": "meta"}).is_meta
    with pytest.raises(wire.ProtocolError):
        annotate(torch.zeros(2), {"device": "meta"})              # data, claimed meta
    with pytest.raises(wire.ProtocolError):
        annotate(torch.empty(2, device="meta"), {"device": "cpu"})   # no data, claimed cpu
    with pytest.raises(wire.ProtocolError):                       # meta on a run that did not ask for it
        _annotator(frozenset({"cpu"}))(torch.empty(2, device="meta"), {"device": "meta"})


def test_meta_results_are_checked_for_shape_dtype_and_device_only():
    got = torch.empty(3, 5, dtype=torch.bool, device="meta")
    got.lumen_meta = type("M", (), {"pytype": "torch.Tensor", "device": "meta"})()
    expected = torch.ones(3, 5, dtype=torch.bool)
    expect.tensor(got, expected, what="m", axes=("L_q", "L_k"), sizes={"L_q": 3, "L_k": 5},
                  dtype=torch.bool, device="meta")
    with pytest.raises(expect.CheckFailed) as exc:
        expect.tensor(torch.ones(3, 5, dtype=torch.bool), expected, what="m", axes=("L_q", "L_k"),
                      sizes={"L_q": 3, "L_k": 5}, dtype=torch.bool, device="meta")
    assert exc.value.diagnosis.kind == "device"


# -------------------------------------------------------------------------------------------------
# A likely mistake explains the run


def _value_test(i: int, misconception: str | None) -> Result:
    diag = Diagnosis("values", f"output: wrong {i}", misconception=misconception,
                     details={"variants_compared": ["no-scale", "mask-inverted"], "variant_max_error": 1e-7,
                              "variant_tolerance": 1e-5})
    return Result(id=f"t{i}", name=f"t{i}", group="values", status=Status.FAIL, diagnosis=diag)


def test_one_match_in_ten_failing_value_tests_names_no_mistake():
    tests = [_value_test(0, "mask-inverted")] + [_value_test(i, None) for i in range(1, 10)]
    assert summarise_misconceptions(tests) == []


def test_a_mistake_matching_most_failing_value_tests_is_named():
    tests = [_value_test(i, "no-scale") for i in range(7)] + [_value_test(i, None) for i in range(7, 10)]
    (entry,) = summarise_misconceptions(tests)
    assert entry["id"] == "no-scale" and entry["matched"] == 7


def test_half_is_not_most():
    tests = [_value_test(i, "no-scale") for i in range(5)] + [_value_test(i, None) for i in range(5, 10)]
    assert summarise_misconceptions(tests) == []


def test_a_test_that_alone_matched_says_what_it_saw_without_a_guess():
    from rich.console import Console

    from lumen_ex.cli.render import _failure_panel

    test = _value_test(0, "mask-inverted")
    test.diagnosis.hint = "your output equals attention with the mask inverted to 1e-6 on this test's input"
    con = Console(width=160, record=True, color_system=None)
    con.print(_failure_panel(test, named=[]))
    text = con.export_text()
    assert "seen on this test: your output equals attention with the mask inverted" in text
    assert "likely mistake" not in text


# -------------------------------------------------------------------------------------------------
# Digits, and the line behind a float32 result


@pytest.mark.parametrize("expected,got", [(-0.30001, -0.30004), (0.1234567, 0.1234568), (1.0, 1.0 + 1e-12),
                                          (0.6072, 2.165)])
def test_value_diffs_show_digits_that_differ(expected, got):
    a, b = expect.distinct_digits(expected, got)
    assert a != b and float(a) == pytest.approx(expected, rel=1e-3) and float(b) == pytest.approx(got, rel=1e-3)


def test_value_diffs_keep_four_digits_when_fewer_would_do():
    assert expect.distinct_digits(0.6072, 2.165) == ("0.6072", "2.165")


def _dtype_diag(expected: str = "float64") -> Diagnosis:
    return Diagnosis("dtype", "output has dtype float32", expected=expected, got="float32")


def test_a_float32_cast_never_cast_back_is_named_with_its_line():
    lines = ["import torch", "def f(q):", "    w = torch.softmax(q.float(), -1)", "    return w"]
    diag = _dtype_diag()
    expect.float32_cause(diag, lines, "attention.py")
    assert diag.misconception == "float32-not-cast-back"
    assert diag.details["where"] == "attention.py line 3" and diag.details["code"].startswith("w = torch.softmax")


def test_a_new_tensor_without_dtype_is_named_with_its_line():
    lines = ["def f(q, mask):", "    bias = torch.zeros(mask.shape, device=q.device)", "    return q + bias"]
    diag = _dtype_diag("float16")
    expect.float32_cause(diag, lines, "attention.py")
    assert diag.misconception == "new-tensor-dtype" and diag.details["where"] == "attention.py line 2"


@pytest.mark.parametrize("lines", [
    ["    a = q.float()", "    b = torch.zeros(3)"],                   # both kinds: no guess
    ["    return q.double().half()"],                                   # neither
    ["    w = torch.softmax(q.float(), -1).type_as(q)", "    m = torch.ones(3, dtype=q.dtype)"],   # cast back
])
def test_no_line_or_two_kinds_names_nothing(lines):
    diag = _dtype_diag()
    expect.float32_cause(diag, lines, "attention.py")
    assert diag.misconception is None and "where" not in diag.details


# -------------------------------------------------------------------------------------------------
# The coverage table


SUITES = {"attention": "src/lumen_ex/exercises/01-attention/suite/test_attention.py",
          "kv_cache": "src/lumen_ex/exercises/02-kv-cache/suite/test_kv_cache.py"}


@pytest.mark.parametrize("suite", sorted(SUITES))
def test_every_test_the_table_names_exists(suite):
    """Each test id docs/contract-coverage.md cites is a test of the hidden suites (parametrized ids
    included), so the table cannot drift from the suites."""
    table = (ROOT / "docs" / "contract-coverage.md").read_text()
    source = (ROOT / SUITES[suite]).read_text()
    defined = set(re.findall(r"^def (test_\w+)", source, re.MULTILINE))
    other = (ROOT / SUITES["kv_cache" if suite == "attention" else "attention"]).read_text()
    both = defined | set(re.findall(r"^def (test_\w+)", other, re.MULTILINE))
    cited = set(re.findall(r"`(test_\w+)", table))
    assert cited - both == set(), f"the table cites tests that do not exist: {cited - both}"
    assert defined - cited - {"test_functions_defined", "test_signature"} <= set(), \
        f"tests of {suite} the table does not map to a sentence: {defined - cited}"

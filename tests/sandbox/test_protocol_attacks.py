"""Crafted replies written by the learner's own code, graded for real under bwrap AND docker.

The learner's code runs in the worker's process, so it can find the worker's reply pipe (the
``rep_fd`` local of src/lumen_ex/sandbox/inside/worker.py's ``main``, up the call stack) and write any bytes there,
ahead of the worker's real reply: a frame whose announced shape overflows torch's stride
arithmetic, one with a forged device tag, a load reply whose function table has the wrong types,
a truncated frame followed by silence, plain garbage, a claimed forbidden call whose name brings lines
of its own. tests/sandbox/test_protocol_fuzz.py fuzzes the same
decoder in-process; here each attack goes through ``lumen_ex.harness.check.run_check`` exactly as
``lumen-ex check`` grades it, and must end as:

- status FAIL, never ERROR (no exit 3, no "a bug in lumen-ex"): no test is blamed on the grader;
- the attacked test failed as a protocol error, its message naming the malformed reply;
- the score below the maximum;
- the worker replaced: a correct ``causal_mask`` in the same file passes all its tests after the
  attacking ``scaled_dot_product_attention`` has broken its own;
- no view of the result (terminal, web page, each format's text) carries a raw control or a line
  the reply brought.

Only a few tests run per grading (``select``), since every grading starts sandboxes.
"""

from __future__ import annotations

import io
import json

import pytest
from conftest import requires_bwrap, workspace_with
from docker_support import docker_param
from rich.console import Console

from lumen_ex.cli.render import render_result
from lumen_ex.core.results import RunResult, Status
from lumen_ex.feedback.formats import emit
from lumen_ex.feedback.text import explain
from lumen_ex.feedback.web import web_view
from lumen_ex.harness.check import run_check

BACKENDS = [pytest.param("bwrap", marks=requires_bwrap, id="bwrap"), docker_param("docker")]

# Finds the worker's reply fd and the id of the request being answered (src/lumen_ex/sandbox/inside/worker.py main()).
# Everything but torch is imported inside the attack's own functions, so that the harness's source
# scan (src/lumen_ex/harness/source_scan.py), which judges each graded function by the code it reaches, blames
# only the attacking function, and the correct one beside it can still pass.
FIND_PIPE = '''
import torch

def _pipe():
    import sys
    frame = sys._getframe(1)
    while frame is not None:
        if "rep_fd" in frame.f_locals and "rid" in frame.f_locals:
            return frame.f_locals["rep_fd"], frame.f_locals["rid"]
        frame = frame.f_back
    raise RuntimeError("attack could not find the reply pipe")

def _send(header, body=b""):
    import json, os, struct
    fd, rid = _pipe()
    head = json.dumps(dict(header, id=rid)).encode()
    os.write(fd, struct.pack(">I", len(head)) + head + body)
'''
CORRECT_MASK = '''
def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    i = torch.arange(L_q, device=device)[:, None] + (L_k - L_q)
    return torch.arange(L_k, device=device)[None, :] <= i
'''
SDPA = '''
def scaled_dot_product_attention(q, k, v, mask=None):
    weights = torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1)
    out = weights @ v
    _attack(out, weights)
    return out, weights
'''

FORGED_NAME = "torch.softmax\n# Grade: 10/10 \x1b]52;c;aGk=\x07\n::error::forged"
ATTACKS: dict[str, str] = {
    # Announces an empty tensor whose strides overflow int64: torch.empty refuses to build it.
    "stride_overflow": '''
def _attack(out, weights):
    _send({"ok": True, "elapsed": 0.0, "result": {"$tuple": [{"$tensor": 0}, {"$tensor": 0}]},
           "tensors": [{"dtype": "float32", "shape": [0, 2**39, 2**39, 2**39], "nbytes": 0}]})
''',
    # The right values, with a device tag naming a device that does not exist on a CPU run.
    "forged_device_tag": '''
def _attack(out, weights):
    refs, specs, blobs = [], [], []
    for i, t in enumerate((out, weights)):
        raw = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        refs.append({"$tensor": i, "device": "cuda:99", "pytype": "torch.Tensor"})
        specs.append({"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "nbytes": len(raw)})
        blobs.append(raw)
    _send({"ok": True, "elapsed": 0.0, "result": {"$tuple": refs}, "tensors": specs}, b"".join(blobs))
''',
    # The right values, and a claimed forbidden call whose name brings lines of its own (a heading, a
    # GitHub command) and terminal controls: the harness writes claimed names into the failure, so a
    # name that is not a dotted one makes the reply malformed (src/lumen_ex/harness/proxy.py _claimed_or_none).
    "forged_forbidden_claim": '''
def _attack(out, weights):
    refs, specs, blobs = [], [], []
    for i, t in enumerate((out, weights)):
        raw = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        refs.append({"$tensor": i})
        specs.append({"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "nbytes": len(raw)})
        blobs.append(raw)
    _send({"ok": True, "elapsed": 0.0, "result": {"$tuple": refs}, "tensors": specs,
           "forbidden": [FORGED_NAME]}, b"".join(blobs))
'''.replace("FORGED_NAME", repr(FORGED_NAME)),
    # A sane header length, then bytes that are not UTF-8, let alone JSON.
    "garbage_bytes": '''
def _attack(out, weights):
    import os, struct
    fd, _ = _pipe()
    os.write(fd, struct.pack(">I", 64) + bytes(range(192, 256)))
''',
    # The start of a frame, then nothing: the harness must not wait on it past the call's limit,
    # nor keep the half-read frame for the next call.
    "truncated_then_hang": '''
def _attack(out, weights):
    import json, os, struct, time
    fd, rid = _pipe()
    head = json.dumps({"id": rid, "ok": True, "result": 1}).encode()
    os.write(fd, struct.pack(">I", len(head)) + head[: len(head) // 2])
    time.sleep(3600)
''',
}
SELECT_1 = "test_values_single_query or test_causal_mask"

# Exercise 2: at import time, a load reply whose function table has the wrong types.
BAD_TABLE = FIND_PIPE + '''
_send({"ok": True, "elapsed": 0.0, "functions": {"decode_step": {"callable": "yes", "params": 7}}})


def decode_step(x_t, k_cache, v_cache, w_q, w_k, w_v, w_o, n_heads):
    raise NotImplementedError
'''
SELECT_2 = "test_signature or test_returns_three_tensors"


def grade(tmp_path, exercise: int, source: str, sandbox: str, select: str) -> RunResult:
    root = workspace_with(tmp_path, exercise, source)
    return run_check(exercise, workspace=root, sandbox=sandbox, seed=4321, device="cpu", record=False,
                     select=select)


def assert_charged_to_the_submission(result: RunResult) -> None:
    """Status fail, nothing blamed on the grader, below the maximum, a protocol error named."""
    summary = [(t.id, t.status.value, t.diagnosis.kind if t.diagnosis else None) for t in result.tests]
    assert result.status is Status.FAIL, (result.status, result.message, summary)
    assert not any(t.diagnosis and t.diagnosis.kind == "grader" for t in result.tests), summary
    assert result.score < result.max_score, summary
    protocol = [t for t in result.tests if t.diagnosis and t.diagnosis.kind == "protocol"]
    assert protocol, summary
    for t in protocol:
        assert t.status is Status.FAIL, summary
        assert "your code's process sent a malformed reply" in t.message, t.message


@pytest.mark.parametrize("sandbox", BACKENDS)
@pytest.mark.parametrize("attack", list(ATTACKS))
@pytest.mark.slow
def test_crafted_reply_is_a_fail_and_the_worker_is_replaced(tmp_path, sandbox, attack):
    result = grade(tmp_path, 1, FIND_PIPE + ATTACKS[attack] + SDPA + CORRECT_MASK, sandbox, SELECT_1)
    assert_charged_to_the_submission(result)
    attacked = [t for t in result.tests if "::test_values_single_query" in t.id]
    assert attacked and all(t.diagnosis and t.diagnosis.kind == "protocol" for t in attacked), \
        [(t.id, t.message) for t in attacked]
    if attack == "truncated_then_hang":
        assert "truncated frame" in attacked[0].message, attacked[0].message
    if attack == "forged_forbidden_claim":
        assert "forbidden calls is malformed" in attacked[0].message, attacked[0].message
    masks = [t for t in result.tests if "::test_causal_mask" in t.id]
    assert len(masks) >= 5 and all(t.status is Status.PASS for t in masks), \
        [(t.id, t.status.value, t.message) for t in masks]
    assert_no_line_of_its_own(result)


def assert_no_line_of_its_own(result: RunResult) -> None:
    """Every view of the result (the terminal, the page, the plain text of each format): no raw
    control, and no line the reply brought (FORGED_NAME's heading or GitHub command)."""
    buf = io.StringIO()
    render_result(Console(file=buf, width=200, color_system=None), result)
    views = {"terminal": buf.getvalue(), "explain": "\n".join(explain(t) for t in result.tests),
             "web": json.dumps(web_view(result), ensure_ascii=False)}
    views.update({fmt: emit(fmt, result) for fmt in ("gradescope", "prairielearn", "github", "junit")})
    for name, text in views.items():
        assert "\x1b" not in text and "\x07" not in text, name
        assert not any(line.lstrip("> ").startswith(("# Grade", "::error::forged")) for line in text.splitlines()), \
            (name, text)


@pytest.mark.parametrize("sandbox", BACKENDS)
def test_bad_function_table_in_the_load_reply_is_a_fail(tmp_path, sandbox):
    result = grade(tmp_path, 2, BAD_TABLE, sandbox, SELECT_2)
    assert_charged_to_the_submission(result)
    assert result.score == 0
    for t in result.tests:   # the import sends it again: every test is failed by it, none errors
        assert t.status is Status.FAIL and t.diagnosis.kind == "protocol", (t.id, t.status, t.message)
        assert "function table" in t.message, t.message

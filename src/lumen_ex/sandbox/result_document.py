"""Read the result document a grading container wrote, trusting nothing about it.

The host takes the verdict of a docker check only from this file (never from the container's
output or exit code), and only after every field has been checked against the schema of
docs/result.schema.json, plus a few consistency rules: the exercise and seed are the ones asked
for, scores add up, and a "pass" has no failing test. The file is opened without following
symlinks, must be a regular file, and is read only up to a size cap. Anything else raises
:class:`DocumentError`, which the docker backend turns into a check with status "error".
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any, NoReturn

from lumen_ex.core.results import DIAGNOSIS_KINDS, SCHEMA_VERSION, RunResult, Status

MAX_BYTES = 8 * 1024 * 1024
MAX_TESTS = 2000
MAX_TEXT = 64 * 1024
RUN_STATUSES = ("pass", "fail", "error")
TEST_STATUSES = tuple(s.value for s in Status)
TOP_KEYS = {"schema_version", "exercise", "status", "score", "max_score", "duration", "message",
            "sandbox", "device", "seed", "versions", "tests"}
TEST_KEYS = {"id", "name", "group", "status", "score", "max_score", "message", "diagnosis", "output", "duration"}
TEST_OPTIONAL_KEYS = {"tolerance_used"}
DIAGNOSIS_KEYS = {"kind", "summary", "expected", "got", "details", "misconception", "hint"}
OPTIONAL_TOP_KEYS = {"misconceptions", "source"}
MISCONCEPTION_KEYS = {"id", "sentence", "matched", "of", "max_error"}
MISCONCEPTION_OPTIONAL_KEYS = {"max_error_float64"}


class DocumentError(Exception):
    """The result document is missing or malformed; the message says what is wrong, in one line."""


def read_document(path: Path, *, exercise: dict[str, Any], seed: int, max_bytes: int = MAX_BYTES) -> RunResult:
    """Open, size-check, parse and validate ``path``; return the result it holds."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise DocumentError("the grader container wrote no result document") from None
    except OSError as exc:
        raise DocumentError(f"the result document cannot be opened: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise DocumentError("the result document is not a regular file")
        if info.st_size > max_bytes:
            raise DocumentError(f"the result document is {info.st_size} bytes, over the {max_bytes} byte cap")
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > max_bytes:
        raise DocumentError(f"the result document is over the {max_bytes} byte cap")
    return parse_document(b"".join(chunks), exercise=exercise, seed=seed)


def parse_document(raw: bytes, *, exercise: dict[str, Any], seed: int) -> RunResult:
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise DocumentError(f"the result document is not valid JSON ({type(exc).__name__})") from None
    validate(data, exercise=exercise, seed=seed)
    try:
        return RunResult.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:  # validate() should have caught it
        raise DocumentError(f"the result document does not fit the result record: {exc!r}") from None


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def validate(data: Any, *, exercise: dict[str, Any], seed: int) -> None:
    """Raise DocumentError naming the first field that is not as docs/result.schema.json says."""
    obj = _object(data, "the document", TOP_KEYS, TOP_KEYS | OPTIONAL_TOP_KEYS)
    if obj["schema_version"] != SCHEMA_VERSION:
        raise DocumentError(f"schema_version is {str(obj['schema_version'])[:20]!r}, not {SCHEMA_VERSION!r}")
    ex = _object(obj["exercise"], "exercise", {"number", "slug", "title"}, {"number", "slug", "title"})
    if not (_is_int(ex["number"]) and isinstance(ex["slug"], str) and isinstance(ex["title"], str)):
        raise DocumentError("exercise must hold an integer number, a slug and a title")
    if ex["number"] != exercise["number"] or ex["slug"] != exercise["slug"]:
        raise DocumentError(f"the document is for exercise {ex['number']} ({str(ex['slug'])[:40]}), "
                            f"not {exercise['number']} ({exercise['slug']})")
    _enum(obj["status"], "status", RUN_STATUSES)
    for key in ("score", "max_score", "duration"):
        _number(obj[key], key)
    _text(obj["message"], "message")
    box = _object(obj["sandbox"], "sandbox", {"backend", "isolated", "limits", "note"},
                  {"backend", "isolated", "limits", "note"})
    if box["backend"] != "docker" or box["isolated"] is not True:
        raise DocumentError("sandbox must say backend docker, isolated")
    _string_map(box["limits"], "sandbox.limits")
    _text(box["note"], "sandbox.note")
    _enum(obj["device"], "device", ("cpu", "cuda"))
    if not _is_int(obj["seed"]) or obj["seed"] != seed:
        raise DocumentError(f"seed is {str(obj['seed'])[:20]}, not the {seed} asked for")
    _string_map(obj["versions"], "versions")
    tests = obj["tests"]
    if not isinstance(tests, list) or len(tests) > MAX_TESTS:
        raise DocumentError(f"tests must be a list of at most {MAX_TESTS} entries")
    for i, test in enumerate(tests):
        _test(test, f"tests[{i}]")
    _misconceptions(obj.get("misconceptions", []))
    if "source" in obj:
        _source(obj["source"])
    _consistent(obj)


def _source(source: Any) -> None:
    """The optional record of the bytes graded (src/lumen_ex/core/snapshot.py)."""
    s = _object(source, "source", {"file", "sha256", "bytes"}, {"file", "sha256", "bytes"})
    _text(s["file"], "source.file")
    if not isinstance(s["sha256"], str) or len(s["sha256"]) != 64 or s["sha256"].strip("0123456789abcdef"):
        raise DocumentError("source.sha256 must be 64 hex digits")
    if not _is_int(s["bytes"]) or s["bytes"] < 0:
        raise DocumentError("source.bytes must be a whole number")


def _misconceptions(entries: Any) -> None:
    """The optional run-level summary of named mistakes (RunResult.misconceptions)."""
    if not isinstance(entries, list) or len(entries) > MAX_TESTS:
        raise DocumentError(f"misconceptions must be a list of at most {MAX_TESTS} entries")
    for i, entry in enumerate(entries):
        e = _object(entry, f"misconceptions[{i}]", MISCONCEPTION_KEYS, MISCONCEPTION_KEYS | MISCONCEPTION_OPTIONAL_KEYS)
        _text(e["id"], f"misconceptions[{i}].id")
        _text(e["sentence"], f"misconceptions[{i}].sentence")
        for key in ("matched", "of"):
            if not _is_int(e[key]) or e[key] < 1:
                raise DocumentError(f"misconceptions[{i}].{key} must be a positive integer")
        for key in ("max_error", "max_error_float64"):
            if key in e:
                _number(e[key], f"misconceptions[{i}].{key}")


def _test(data: Any, where: str) -> None:
    test = _object(data, where, TEST_KEYS, TEST_KEYS | TEST_OPTIONAL_KEYS)
    for key in ("id", "name", "group", "message", "output"):
        _text(test[key], f"{where}.{key}")
    _enum(test["status"], f"{where}.status", TEST_STATUSES)
    for key in ("score", "max_score", "duration"):
        _number(test[key], f"{where}.{key}")
    if "tolerance_used" in test:
        _number(test["tolerance_used"], f"{where}.tolerance_used")
        if test["tolerance_used"] > 1 or test["status"] != "pass":
            raise DocumentError(f"{where}.tolerance_used must be at most 1, on a passing test")
    if test["score"] > test["max_score"] + 1e-6:
        raise DocumentError(f"{where} scores {test['score']} of {test['max_score']}")
    if test["status"] != "pass" and test["score"] > 0:
        raise DocumentError(f"{where} did not pass but scores {test['score']}")
    diag = test["diagnosis"]
    if diag is not None:
        d = _object(diag, f"{where}.diagnosis", {"kind", "summary"}, DIAGNOSIS_KEYS)
        _enum(d["kind"], f"{where}.diagnosis.kind", DIAGNOSIS_KINDS)
        _text(d["summary"], f"{where}.diagnosis.summary")
        for key in ("misconception", "hint"):
            if key in d:
                _text(d[key], f"{where}.diagnosis.{key}")
        if "details" in d and not isinstance(d["details"], dict):
            raise DocumentError(f"{where}.diagnosis.details must be an object")


def _consistent(obj: dict[str, Any]) -> None:
    total = sum(t["score"] for t in obj["tests"])
    most = sum(t["max_score"] for t in obj["tests"])
    if abs(total - obj["score"]) > 1e-3 or abs(most - obj["max_score"]) > 1e-3:
        raise DocumentError("the scores of the tests do not add up to the document's score")
    if obj["score"] > obj["max_score"] + 1e-6:
        raise DocumentError("score is above max_score")
    if obj["status"] == "pass":
        bad = [t["id"] for t in obj["tests"] if t["status"] not in ("pass", "skipped")]
        if bad or not obj["tests"]:
            raise DocumentError("status is pass, but not every test passed")
    if obj["status"] == "fail" and all(t["status"] in ("pass", "skipped") for t in obj["tests"]):
        raise DocumentError("status is fail, but no test failed")


def _object(data: Any, where: str, required: set[str], allowed: set[str]) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise DocumentError(f"{where} must be a JSON object")
    missing = sorted(required - data.keys())
    if missing:
        raise DocumentError(f"{where} lacks {', '.join(missing)}")
    extra = sorted(str(k)[:40] for k in data.keys() - allowed)
    if extra:
        raise DocumentError(f"{where} has unknown fields: {', '.join(extra)}")
    return data


def _is_int(value: Any) -> bool:
    return type(value) is int


def _number(value: Any, where: str) -> None:
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise DocumentError(f"{where} must be a non-negative number")


def _text(value: Any, where: str) -> None:
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise DocumentError(f"{where} must be a string of at most {MAX_TEXT} characters")


def _enum(value: Any, where: str, allowed: tuple[str, ...]) -> None:
    if not isinstance(value, str) or value not in allowed:
        raise DocumentError(f"{where} is {str(value)[:40]!r}, not one of {', '.join(allowed)}")


def _string_map(value: Any, where: str) -> None:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) and len(v) <= MAX_TEXT
                                              for k, v in value.items()):
        raise DocumentError(f"{where} must map strings to strings")

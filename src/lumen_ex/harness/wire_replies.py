"""The harness's checks of the worker's reply headers: the hello, ``ok``, the timing, a learner's
error and the load reply's function table.

The frames themselves are ``lumen_ex.sandbox.inside.wire`` (shared by both sides); what a reply's
header says is read here, on the trusted side only: the worker never checks its own replies, so
this file is not bound into a sandbox. Every field of a reply is a claim of the worker: each check
here returns plain, checked values of the right types and sizes, or raises ``wire.ProtocolError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from lumen_ex.sandbox.inside.wire_limits import PROTOCOL_VERSION, ProtocolError, clean_text

MAX_PARAMS = 256                  # parameters of one function in the load reply's table
MAX_FRAMES = 16                   # traceback entries of one learner error
PARAM_KINDS = frozenset({"POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD", "VAR_POSITIONAL", "KEYWORD_ONLY",
                         "VAR_KEYWORD"})


class HelloClaim(TypedDict):
    """What a worker's hello says of it, checked."""

    torch: str
    cuda: bool


def check_hello(header: Mapping[str, object]) -> HelloClaim:
    """The worker's first frame: ``{"hello": true, "protocol": 1, "torch": "2.x", "cuda": bool}``."""
    if header.get("hello") is not True:
        raise ProtocolError("the first frame is not a hello")
    protocol = header.get("protocol")
    if type(protocol) is not int or protocol != PROTOCOL_VERSION:
        raise ProtocolError("the hello names another protocol version")
    version, cuda = header.get("torch"), header.get("cuda")
    if type(version) is not str or type(cuda) is not bool:
        raise ProtocolError("the hello's torch version or cuda flag has the wrong type")
    return {"torch": clean_text(version, 40), "cuda": cuda}


def check_ok(header: Mapping[str, object]) -> bool:
    """A reply's ``ok`` flag: exactly true or false."""
    ok = header.get("ok")
    if type(ok) is not bool:
        raise ProtocolError("the reply's 'ok' is not true or false")
    return ok


def check_elapsed(header: Mapping[str, object]) -> float:
    """The worker's own timing of a call (advisory): a finite, non-negative number of seconds."""
    value = header.get("elapsed", 0.0)
    if not (type(value) in (int, float) and isinstance(value, (int, float)) and 0 <= value < 1e7):
        raise ProtocolError("the reply's 'elapsed' is not a number of seconds")
    return float(value)


def check_error(error: object) -> dict[str, Any]:
    """A learner's exception as the worker describes it: a claim, of which only text is kept."""
    if not isinstance(error, dict):
        raise ProtocolError("the reply's 'error' is not an object")
    kind, message, where = error.get("type"), error.get("message"), error.get("where", [])
    if type(kind) is not str or type(message) is not str:
        raise ProtocolError("the error's type or message is not a string")
    if not isinstance(where, list) or len(where) > MAX_FRAMES:
        raise ProtocolError("the error's traceback is not a short list")
    line = error.get("syntax_line")
    if line is not None and type(line) is not int:
        raise ProtocolError("the error's syntax line is not a number")
    return {"type": clean_text(kind, 100), "message": clean_text(message, 1000),
            "where": [_check_frame(f) for f in where], "syntax_line": line}


def _check_frame(frame: object) -> dict[str, Any]:
    if not isinstance(frame, dict):
        raise ProtocolError("a traceback entry is not an object")
    file, line, function, code = (frame.get(k) for k in ("file", "line", "function", "code"))
    if (type(file) is not str or type(function) is not str or (line is not None and type(line) is not int)
            or (code is not None and type(code) is not str)):
        raise ProtocolError("a traceback entry has fields of the wrong type")
    return {"file": clean_text(file, 200), "line": line, "function": clean_text(function, 200),
            "code": clean_text(code or "", 200)}


def check_functions(table: object, names: list[str]) -> dict[str, dict[str, Any] | None]:
    """The load reply's function table: exactly one entry per function asked for, each None (not
    defined) or ``{"callable": bool, "params": None | [{"name", "kind", "default"}, ...]}``."""
    if not isinstance(table, dict) or set(table) != set(names):
        raise ProtocolError("the function table does not list exactly the functions asked for")
    return {name: _check_function(table[name]) for name in names}


def _check_function(entry: object) -> dict[str, Any] | None:
    if entry is None:
        return None
    if not isinstance(entry, dict) or type(entry.get("callable")) is not bool:
        raise ProtocolError("a function table entry is not {callable: bool, params: ...}")
    params = entry.get("params")
    if params is None:
        return {"callable": entry["callable"], "params": None}
    if not isinstance(params, list) or len(params) > MAX_PARAMS:
        raise ProtocolError("a function's parameters are not a list")
    return {"callable": entry["callable"], "params": [_check_param(p) for p in params]}


def _check_param(param: object) -> dict[str, Any]:
    if not isinstance(param, dict):
        raise ProtocolError("a parameter is not an object")
    name, kind, default = param.get("name"), param.get("kind"), param.get("default")
    if type(name) is not str or kind not in PARAM_KINDS or (default is not None and type(default) is not str):
        raise ProtocolError("a parameter's name, kind or default has the wrong type")
    return {"name": clean_text(name, 200), "kind": kind,
            "default": None if default is None else clean_text(default, 200)}

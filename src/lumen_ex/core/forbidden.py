"""What an exercise forbids: library APIs the learner must implement themselves (exercise data).

An exercise lists them in its exercise.toml (``forbidden = ["torch.nn.functional.softmax"]``), and
describes each in a ``[forbidden_api."<dotted name>"]`` table, in its exercise.toml or, shared by
every exercise of the pack that forbids it, in the pack's pack.toml (the exercise's table wins)::

    [forbidden_api."torch.nn.functional.softmax"]
    aliases = ["torch.softmax", "torch.Tensor.softmax"]   # other names of the same function
    built_on = ["torch.nn.Softmax"]                         # library APIs that call it
    kernels = ["aten::softmax", "aten::_softmax"]           # the dispatcher operators doing its work
    hint = "Subtract the row maximum, exponentiate, divide by the row sum."

Three readers use the same data, so a pack that forbids another API gets the same protection with
no code change:

- the source scan (src/lumen_ex/harness/source_scan.py) refuses every attribute and import whose
  name is one of these names (the last part of each dotted name, and each kernel's name);
- the worker (src/lumen_ex/sandbox/inside/forbid.py), before the learner's module is imported,
  replaces every Python name with a function that refuses to run, and registers a refusing kernel
  for every operator, so a route the scan missed fails loudly instead of passing;
- the feedback shows ``hint`` with the verdict.

A kernel's operator is the name itself when it is one (``aten::<last part of the name>``): a pack
that lists only ``forbidden = ["torch.nn.functional.softmax"]`` still has ``aten::softmax`` refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")
KERNEL = re.compile(r"^[a-z_][a-z0-9_]*::[A-Za-z_]\w*(\.[A-Za-z_]\w*)?$")
FIELDS = ("aliases", "built_on", "kernels", "hint")


@dataclass(frozen=True)
class ForbiddenAPI:
    """One forbidden API (``name``, dotted) and everything else that reaches its work."""

    name: str
    aliases: tuple[str, ...] = ()     # other dotted names of the same object (torch._C._nn.X)
    built_on: tuple[str, ...] = ()    # library APIs that call it, forbidden with it
    kernels: tuple[str, ...] = ()     # dispatcher operators, "namespace::name" or "namespace::name.overload"
    hint: str = ""                    # what to write instead, shown with the verdict

    @property
    def python_names(self) -> tuple[str, ...]:
        """Every dotted Python name the worker makes unusable."""
        return tuple(dict.fromkeys((self.name, *self.aliases, *self.built_on)))

    def operators(self) -> tuple[str, ...]:
        """The declared kernels, and ``aten::<short name>`` (kept by the worker only when torch has it)."""
        short = self.name.rpartition(".")[2]
        return tuple(dict.fromkeys((*self.kernels, f"aten::{short}")))

    def attribute_names(self) -> tuple[str, ...]:
        """The names the source scan looks for: the last part of every Python name, and every
        kernel's operator name."""
        names = [n.rpartition(".")[2] for n in self.python_names]
        names += [k.partition("::")[2].partition(".")[0] for k in self.kernels]
        return tuple(dict.fromkeys(names))

    def to_wire(self) -> dict[str, str | list[str]]:
        """What the worker is told (src/lumen_ex/sandbox/inside/forbid.py reads it)."""
        return {"api": self.name, "names": list(self.python_names), "kernels": list(self.operators())}


def read(listed: Iterable[object] | None, exercise_tables: Mapping[str, Any] | None,
         pack_tables: Mapping[str, Any] | None) -> tuple[ForbiddenAPI, ...]:
    """The forbidden APIs of one exercise: those ``listed`` in its exercise.toml and those its own
    ``forbidden_api`` tables describe, each described by the exercise's table, else the pack's.
    Raises ValueError (or TypeError) on a malformed table: the catalogue blames the pack for it."""
    wanted = [str(name) for name in listed or ()]
    exercise_tables, pack_tables = dict(exercise_tables or {}), dict(pack_tables or {})
    names = list(dict.fromkeys([*wanted, *exercise_tables]))
    return tuple(_one(name, exercise_tables.get(name, pack_tables.get(name, {}))) for name in names)


def _one(name: str, table: object) -> ForbiddenAPI:
    if not isinstance(table, dict):
        raise TypeError(f"forbidden_api.{name!r} must be a table")
    unknown = sorted(set(table) - set(FIELDS))
    if unknown:
        raise ValueError(f"forbidden_api.{name!r} has unknown keys {unknown} (known: {', '.join(FIELDS)})")

    def names(key: str) -> tuple[str, ...]:
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise TypeError(f"forbidden_api.{name!r}.{key} must be a list of strings")
        return tuple(value)

    hint = table.get("hint", "")
    if not isinstance(hint, str):
        raise TypeError(f"forbidden_api.{name!r}.hint must be a string")
    return ForbiddenAPI(name, names("aliases"), names("built_on"), names("kernels"), hint)


def problems(api: ForbiddenAPI) -> list[str]:
    """What is wrong with one forbidden API's data, each with what to write instead."""
    found = []
    for dotted in api.python_names:
        if not DOTTED.fullmatch(dotted):
            found.append(f"forbidden API {dotted!r} must be a dotted name like torch.nn.X")
    for kernel in api.kernels:
        if not KERNEL.fullmatch(kernel):
            found.append(f"kernel {kernel!r} of {api.name} must be an operator like aten::name or aten::name.overload")
    return found


def attribute_names(apis: Iterable[ForbiddenAPI]) -> dict[str, str]:
    """Every attribute name that reaches a forbidden API -> the API's dotted name: an API's own name
    names it; another name, the first API that lists it."""
    apis = list(apis)
    found: dict[str, str] = {api.name.rpartition(".")[2]: api.name for api in apis}
    for api in apis:
        for short in api.attribute_names():
            found.setdefault(short, api.name)
    return found


def as_apis(forbidden: Iterable[ForbiddenAPI | str]) -> tuple[ForbiddenAPI, ...]:
    """``forbidden`` as ForbiddenAPI values (a plain dotted string is an API described by its name alone)."""
    return tuple(f if isinstance(f, ForbiddenAPI) else ForbiddenAPI(str(f)) for f in forbidden)

"""Which forbidden APIs a graded function can reach, proven from the learner's source by the harness.

The worker refuses forbidden APIs too (src/lumen_ex/sandbox/inside/forbid.py), but it shares its
process with the learner's code, which can undo or forge anything there: that layer adds a
failure, never a pass. The proof is this scan. It runs in the trusted harness, parses the exact
bytes the worker executes (never runs them), and looks at the code that can run: a graded
function, the module-level functions, classes and names it uses (transitively), and everything the
module runs when it is imported. What is forbidden, and every name that reaches it, is exercise
data (src/lumen_ex/core/forbidden.py). In that code it finds:

- forbidden APIs, however they are named: an attribute of a forbidden name on anything but the
  learner's own classes and functions (``F.scaled_dot_product_attention``,
  ``torch._C._nn.scaled_dot_product_attention``, ``__import__("torch").nn.functional....``,
  ``torch.ops.aten._scaled_dot_product_flash_attention``, ``nn.MultiheadAttention``, and the
  library classes the data says are built on them); a forbidden name imported under any alias; a
  forbidden name given as a literal to getattr;
- code it cannot follow, which it refuses rather than trusts ("cannot be verified"). It is an
  allow-list (src/lumen_ex/harness/scan_rules.py): modules outside ALLOWED_MODULES, standard-library
  attributes outside MODULE_ATTRIBUTES (those that evaluate strings: typing.get_type_hints,
  operator.attrgetter ...), private names on any object, dunders beyond a short list, names looked
  up at run time (getattr with a computed name, ``vars(F)[...]``, ``globals()``), code built from
  strings (eval, exec, compile), torch's code loaders, a graded function not bound at the top of
  the file, a module-level ``__getattr__``;
- (shadowing_files) a file beside the learner's named like a module the worker could import.

Code that never runs is not held against the learner: an ``if __name__ == "__main__":`` self-test
that compares with the library, a module-level helper no graded function uses.

Every scan is bounded (MAX_SOURCE_BYTES, MAX_NODES, SCAN_SECONDS) and each node is visited once,
so a scan is linear in the size of the file; a file over a bound is refused ("too large to
check"), never skipped.

The scan is in three files: this one indexes the module and walks what each graded function
reaches; src/lumen_ex/harness/scan_checks.py checks each node it meets; src/lumen_ex/harness/scan_rules.py
holds the tables of what is allowed.
"""

from __future__ import annotations

import ast
import time
from collections.abc import Iterable
from pathlib import Path
from typing import cast

from lumen_ex.core import bounded, snapshot
from lumen_ex.core.forbidden import ForbiddenAPI
from lumen_ex.harness.scan_checks import NodeChecks
from lumen_ex.harness.scan_rules import (
    MODULE_HOOKS,
    Finding,
    forbidden_names,
    is_getattr,
    is_main_guard,
    is_module,
    literal,
    pure_alias,
)

MAX_SOURCE_BYTES = snapshot.MAX_BYTES   # the bound of the snapshot the scan reads (src/lumen_ex/core/snapshot.py)
MAX_NODES = 100_000                # syntax-tree nodes: about 20 times the largest honest solution
SCAN_SECONDS = 5.0                 # for parsing and for each graded function's scan
_CHECK_EVERY = 2048                # nodes between two looks at the clock


class ScanRefused(Exception):
    """The file cannot be scanned within the bounds (size, nodes, time): a fail, never a skip."""


class _Clock:
    """A deadline, looked at every few thousand nodes."""

    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds
        self.count = 0

    def tick(self) -> None:
        self.count += 1
        if self.count % _CHECK_EVERY == 0 and time.monotonic() > self.deadline:
            raise ScanRefused(f"it takes the grader more than {SCAN_SECONDS:g} s to check")


class SourceScan(NodeChecks):
    """What each graded function of one learner module can reach, from its source (bytes or text).
    The checks on each node it reaches are :class:`NodeChecks`'s (src/lumen_ex/harness/scan_checks.py)."""

    def __init__(self, source: bytes | str, forbidden: Iterable[ForbiddenAPI | str]):
        self.names = forbidden_names(forbidden)   # ForbiddenAPI data (core/forbidden.py) or dotted names
        raw = source.encode("utf-8") if isinstance(source, str) else source
        if len(raw) > MAX_SOURCE_BYTES:
            raise ScanRefused(f"the file is {len(raw) // 1024} KiB, over the {MAX_SOURCE_BYTES // 1024} KiB "
                              "the grader checks")
        started = time.monotonic()
        try:
            self.tree = ast.parse(raw)   # bytes: decoded as Python decodes them (coding cookie, BOM)
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
            raise ScanRefused(f"the grader cannot parse it ({type(exc).__name__})") from None
        if time.monotonic() - started > SCAN_SECONDS:
            raise ScanRefused(f"it takes the grader more than {SCAN_SECONDS:g} s to parse")
        self.defs: dict[str, list[ast.AST]] = {}        # module-level name -> the nodes that define it
        self.own: set[str] = set()                       # names bound only by a module-level def / class
        self.modules: dict[str, str] = {}                # name -> the module it is bound to, or came from
        self.strict: set[str] = set()                    # names bound to a module itself (not a value)
        self.bases: set[int] = set()                     # nodes used as `x` in x.attr or x(...)
        self.roots: list[ast.AST] = []                   # what runs when the module is imported
        self.imports: list[ast.Import | ast.ImportFrom] = []              # module-level imports (run at import too)
        self._index()
        self._cache: dict[str, list[Finding]] = {}

    # -- indexing the module (one pass over every node) ----------------------------------------

    def _index(self) -> None:
        clock = _Clock(SCAN_SECONDS)
        bound_otherwise: set[str] = set()
        defined: set[str] = set()
        pairs: list[tuple[str, ast.AST]] = []            # (target name, the value assigned to it)
        count = 0
        for node in ast.walk(self.tree):
            count += 1
            if count > MAX_NODES:
                raise ScanRefused(f"it has more than {MAX_NODES} syntax nodes, more than the grader checks")
            clock.tick()
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                bound_otherwise.add(node.id)
            elif isinstance(node, ast.arg):
                bound_otherwise.add(node.arg)
            elif isinstance(node, ast.Attribute):
                self.bases.add(id(node.value))
            elif isinstance(node, ast.Call):
                self.bases.add(id(node.func))
                if is_getattr(node) or (isinstance(node.func, ast.Name) and node.func.id == "hasattr"
                                         and len(node.args) >= 2):
                    self.bases.add(id(node.args[0]))     # getattr(F, "softmax"): checked by _call
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    local = alias.asname or alias.name.split(".")[0]
                    bound_otherwise.add(local)
                    if isinstance(node, ast.Import):
                        self.modules[local] = alias.name if alias.asname else alias.name.split(".")[0]
                    elif node.module and not node.level:
                        self.modules[local] = f"{node.module}.{alias.name}"
                    self.strict.add(local)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                pairs += [(t.id, node.value) for t in targets if isinstance(t, ast.Name)]
        self._follow_module_aliases(pairs)
        for node in self.tree.body:
            self._top_level(node, defined)
        self.own = defined - bound_otherwise

    def _follow_module_aliases(self, pairs: list[tuple[str, ast.AST]]) -> None:
        """``fn = torch.nn.functional`` makes fn a name of that module (followed to a fixed point, in
        time linear in the number of assignments); ``x = torch.zeros(3)`` makes x a value from torch."""
        by_root: dict[str, list[tuple[str, ast.AST]]] = {}
        todo: list[str] = []
        for target, value in pairs:
            seeded = self._import_call_module(value)
            if seeded is not None and target not in self.modules:
                self.modules[target] = seeded
                todo.append(target)
            root = self._root_name(value)
            if root is not None:
                by_root.setdefault(root, []).append((target, value))
        todo += list(self.modules)
        while todo:
            name = todo.pop()
            for target, value in by_root.pop(name, ()):
                if target not in self.modules:
                    self.modules[target] = self.modules[name]
                    if pure_alias(value) and name in self.strict and is_module(self._strict_path(value) or ""):
                        self.strict.add(target)      # a module itself (fn = torch.nn), not a value (torch.float64)
                    todo.append(target)

    def _import_call_module(self, value: ast.AST) -> str | None:
        """``__import__("torch").nn`` or ``importlib.import_module("torch.nn")``: the literal module."""
        while isinstance(value, (ast.Attribute, ast.Subscript)):
            value = value.value
        if isinstance(value, ast.Call) and value.args:
            func = value.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in ("__import__", "import_module"):
                return literal(value.args[0])
        return None

    def _top_level(self, node: ast.AST, defined: set[str]) -> None:
        """Sort one module-level statement into definitions (scanned when used) and roots (run at import)."""
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.defs.setdefault(node.name, []).append(node)
            defined.add(node.name)
            args = node.args
            self.roots += [*node.decorator_list, *args.defaults, *(d for d in args.kw_defaults if d is not None)]
        elif isinstance(node, ast.ClassDef):            # its body runs at import
            self.defs.setdefault(node.name, []).append(node)
            defined.add(node.name)
            self.roots.append(node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            self.imports.append(node)                    # runs at import; its names are definitions
            for alias in node.names:
                self.defs.setdefault(alias.asname or alias.name.split(".")[0], []).append(node)
        elif (isinstance(node, ast.Assign) and pure_alias(node.value)
              and all(isinstance(t, ast.Name) for t in node.targets)):
            for target in node.targets:                  # fn = torch.nn.functional: a definition
                self.defs.setdefault(cast(ast.Name, target).id, []).append(node)
        elif is_main_guard(node):
            return
        else:                                            # anything else runs at import
            self.roots.append(node)
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    self.defs.setdefault(sub.id, []).append(node)

    # -- what a graded function reaches --------------------------------------------------------

    def findings(self, function: str) -> list[Finding]:
        """Forbidden APIs and unverifiable code in ``function``, what it uses, and import-time code."""
        if function not in self._cache:
            self._cache[function] = self._scan_from(function)
        return self._cache[function]

    def reached_from(self, function: str) -> list[str]:
        """The forbidden APIs (dotted) that ``function`` can reach, in the order first met."""
        return list(dict.fromkeys(f.api for f in self.findings(function) if f.api))

    def unverifiable(self, function: str) -> list[Finding]:
        """The code reached from ``function`` that the scan cannot follow."""
        return [f for f in self.findings(function) if not f.api]

    def read_only(self, function: str, api: str) -> Finding | None:
        """Where ``function`` names ``api``, when every place is an attribute only read (``q.grad``
        for torch.autograd.grad), never called or imported; None otherwise."""
        found = [f for f in self.findings(function) if f.api == api]
        return found[0] if found and all(f.read for f in found) else None

    def _scan_from(self, function: str) -> list[Finding]:
        clock = _Clock(SCAN_SECONDS)
        found: list[Finding] = self._definition_problems(function)
        seen_nodes: set[int] = set()
        seen_names: set[str] = set()
        todo_nodes: list[ast.AST] = list(self.roots)
        todo_names = [function]
        for imported in self.imports:                    # which modules: checked whether used or not
            found += [f for f in self._import(imported) if not f.api]
        while todo_nodes or todo_names:
            if not todo_nodes:
                name = todo_names.pop()
                if name not in seen_names:
                    seen_names.add(name)
                    todo_nodes += self.defs.get(name, ())
                continue
            node = todo_nodes.pop()
            if id(node) in seen_nodes:
                continue
            seen_nodes.add(id(node))
            clock.tick()
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in self.defs:
                todo_names.append(node.id)
            found += self._check(node)
            todo_nodes.extend(ast.iter_child_nodes(node))
        found.sort(key=lambda f: (not f.api, f.line))
        return list(dict.fromkeys(found))


    def _definition_problems(self, function: str) -> list[Finding]:
        """A graded function must be bound at the top of the file, where the scan reads it; a
        module-level __getattr__ or __dir__ makes names (a graded one too) appear at run time."""
        found = [Finding("", f"binds {hook} at the top of the file, which makes names appear at run time "
                             "where the grader cannot follow them", getattr(self.defs[hook][0], "lineno", 0))
                 for hook in sorted(MODULE_HOOKS) if hook in self.defs]
        if function not in self.defs:
            found.append(Finding("", f"does not define {function} at the top of the file (def {function}(...):)"))
        return found


class RefusedScan:
    """The scan of a file the grader could not check: every graded function gets the refusal."""

    def __init__(self, why: str):
        self.why = why

    def findings(self, function: str) -> list[Finding]:
        return [Finding("", self.why)]

    def reached_from(self, function: str) -> list[str]:
        return []

    def read_only(self, function: str, api: str) -> Finding | None:
        return None

    def unverifiable(self, function: str) -> list[Finding]:
        return self.findings(function)


def scan_file(path: Path, forbidden: list[ForbiddenAPI] | list[str], data: bytes | None = None) -> SourceScan | RefusedScan:
    """The scan of the learner's file (of ``data``, its snapshot taken when the check began, when
    given: src/lumen_ex/core/snapshot.py); a file that cannot be read or checked within the bounds is
    refused (never skipped). At most MAX_SOURCE_BYTES bytes are ever read: a larger file is refused
    when it is opened."""
    try:
        data = _read_bounded(Path(path), MAX_SOURCE_BYTES) if data is None else data
    except bounded.TooLarge as exc:
        return RefusedScan(f"too large to check: {exc}")
    except OSError as exc:
        return RefusedScan(f"the grader cannot read your file ({exc.strerror or type(exc).__name__})")
    except Exception as exc:  # noqa: BLE001  lumen_ex.core.bounded.NotReadable: a FIFO, a device, a link
        return RefusedScan(f"the grader cannot read your file ({exc})")
    try:
        return SourceScan(data, list(forbidden))
    except ScanRefused as exc:
        return RefusedScan(f"too large to check: {exc}" if "KiB" in str(exc) or "nodes" in str(exc)
                           or " s " in str(exc) else str(exc))
    except (RecursionError, MemoryError) as exc:
        return RefusedScan(f"too large to check: the grader ran out of room ({type(exc).__name__})")


MAX_FOLDER_ENTRIES = 10_000      # entries of the learner's folder looked at for shadowing names
EXTENSION_SUFFIXES = (".py", ".pyc", ".pyw", ".so", ".pyd", ".pth")


def shadowing_files(folder: Path, own_file: str) -> list[str]:
    """The entries of the learner's ``folder`` named like a module the worker could otherwise
    import: a file (``einops.py``, ``numpy.cpython-311-x86_64-linux-gnu.so``) or a package named
    like an allowed module, a standard-library module or one installed where the grader runs; a
    plain folder named like an allowed module (a namespace package stands in only for a module that
    is missing). The worker never puts this folder on sys.path (src/lumen_ex/sandbox/inside/worker.py),
    so these cannot be imported: they are refused all the same, so that no route of the import
    system is left to prove safe. One line per entry, for the learner; at most MAX_FOLDER_ENTRIES
    entries are read (more is itself a refusal)."""
    import os
    import sys

    from lumen_ex.harness.scan_rules import ALLOWED_MODULES

    found: list[str] = []
    try:
        with os.scandir(folder) as entries:
            for count, entry in enumerate(entries):
                if count >= MAX_FOLDER_ENTRIES:
                    return [f"has more than {MAX_FOLDER_ENTRIES} entries in its folder, more than the grader checks"]
                name = entry.name
                if name == own_file:
                    continue
                is_dir = entry.is_dir(follow_symlinks=False)
                stem = name if is_dir else name.split(".")[0]
                if not is_dir and not name.endswith(EXTENSION_SUFFIXES) or not stem.isidentifier():
                    continue
                package = is_dir and os.path.exists(os.path.join(entry.path, "__init__.py"))
                if stem in ALLOWED_MODULES or (
                        (package or not is_dir)
                        and (stem in sys.stdlib_module_names or _importable(stem))):
                    found.append(f"has {name}{'/' if is_dir else ''} beside it, named like the module {stem}, "
                                 "which would stand in for it; rename it")
    except OSError:
        return []
    return found


def _importable(name: str) -> bool:
    """Whether a top-level module of that name is installed where the grader runs."""
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _read_bounded(path: Path, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; never blocks on a FIFO or reads a
    device. A larger file is refused (bounded.TooLarge) when it is opened, before a byte is read,
    and one that grows past ``limit`` while it is read is refused too."""
    return bounded.read_regular(Path(path), limit, name=Path(path).name)

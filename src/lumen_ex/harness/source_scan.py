"""Which forbidden APIs a graded function can reach, proven from the learner's source by the harness.

The worker records forbidden calls as they happen (src/lumen_ex/sandbox/inside/worker.py), but it shares its process
with the learner's code, which can erase or forge that record (tests/corpus/hostile/
forbidden_evasion.py): the record is a hint, never the proof. The proof is this scan. It runs in
the trusted harness, parses the exact bytes the worker imports (never runs them), and looks at the
code that can run: a graded function, the module-level functions, classes and names it uses
(transitively), and everything the module runs when it is imported. In that code it finds:

- forbidden APIs, however they are named: an attribute of a forbidden name on anything but the
  learner's own classes and functions (``F.scaled_dot_product_attention``,
  ``torch._C._nn.scaled_dot_product_attention``, ``__import__("torch").nn.functional....``,
  ``torch.ops.aten._scaled_dot_product_flash_attention``, ``nn.MultiheadAttention``, and the
  library classes built on them such as ``nn.TransformerEncoderLayer``); a forbidden name imported
  under any alias; a forbidden name given as a literal to getattr;
- code it cannot follow, which it refuses rather than trusts ("cannot be verified"): a name looked
  up at run time (getattr with a computed name, ``vars(F)[...]``, ``F.__dict__[...]``,
  ``globals()``, ``sys.modules``), code built from strings (eval, exec, compile), imports of
  modules other than the few an exercise needs (the learner's own extra files, importlib with a
  computed name, pickle, ctypes, gc, inspect, os ...), torch's private internals (``torch._C``)
  and its code loaders (torch.jit, torch.load, torch.library ...).

Code that never runs is not held against the learner: an ``if __name__ == "__main__":`` self-test
that compares with the library, a module-level helper no graded function uses.

Every scan is bounded (MAX_SOURCE_BYTES, MAX_NODES, SCAN_SECONDS) and each node is visited once,
so a scan is linear in the size of the file; a file over a bound is refused ("too large to
check"), never skipped.
"""

from __future__ import annotations

import ast
import os
import time
from dataclasses import dataclass
from pathlib import Path

from lumen_ex.sandbox.inside.wire import SDPA_KERNELS

MAX_SOURCE_BYTES = 256 * 1024      # a solution is a few kilobytes; the stub with its docstrings is 2
MAX_NODES = 100_000                # syntax-tree nodes: about 20 times the largest honest solution
SCAN_SECONDS = 5.0                 # for parsing and for each graded function's scan
_CHECK_EVERY = 2048                # nodes between two looks at the clock

# Library APIs built on a forbidden one: forbidding the key forbids them too.
BUILT_ON = {
    "scaled_dot_product_attention": (*SDPA_KERNELS, "flex_attention", "multi_head_attention_forward",
                                     "MultiheadAttention", "_native_multi_head_attention"),
    "multi_head_attention_forward": ("MultiheadAttention", "_native_multi_head_attention"),
    "MultiheadAttention": (),
}
TRANSFORMER_CLASSES = ("Transformer", "TransformerEncoder", "TransformerDecoder", "TransformerEncoderLayer",
                       "TransformerDecoderLayer", "_transformer_encoder_layer_fwd")

# Modules a solution may import. Others run code (or reach objects by name) the scan cannot see.
ALLOWED_MODULES = {"torch", "math", "numpy", "typing", "__future__", "functools", "itertools",
                   "dataclasses", "collections", "numbers", "warnings", "abc", "enum", "copy", "random",
                   "time", "contextlib", "operator", "einops", "importlib", "sys"}
# Attributes of an allowed module that turn a string into an object, or reach every module.
DENIED_ATTRIBUTES = {
    "torch": {"jit", "load", "package", "hub", "library", "compile", "fx", "export", "overrides",
              "serialization", "cpp_extension", "model_zoo", "load_library", "classes", "utils"},
    "numpy": {"load", "ctypeslib", "lib", "f2py", "distutils", "testing", "fromfile"},
    "typing": {"get_type_hints", "ForwardRef"},
    "operator": {"attrgetter", "methodcaller"},
}
SYS_ALLOWED = {"float_info", "maxsize", "version_info", "version", "platform", "stderr", "stdout", "byteorder"}
IMPORTLIB_ALLOWED = {"import_module"}
# Built-ins that run strings as code or look names up at run time.
REFLECTIVE_BUILTINS = {"eval", "exec", "compile", "globals", "locals", "vars", "open", "breakpoint",
                       "__import__", "getattr", "setattr", "delattr", "__build_class__", "input"}
NAME_TAKING = {"getattr": 1, "setattr": 1, "delattr": 1, "hasattr": 1}
DUNDERS_ALLOWED = {"__init__", "__name__", "__qualname__", "__doc__", "__version__", "__class__",
                   "__call__", "__len__", "__repr__", "__str__", "__file__", "__all__", "__future__",
                   "__annotations__"}


@dataclass(frozen=True)
class Finding:
    """One thing the scan found in code that can run: a forbidden API (``api`` is its dotted name) or
    code it cannot verify (``api`` is empty). ``why`` is a sentence for the learner."""

    api: str
    why: str
    line: int = 0


class ScanRefused(Exception):
    """The file cannot be scanned within the bounds (size, nodes, time): a fail, never a skip."""


def forbidden_names(forbidden: list[str]) -> dict[str, str]:
    """Every attribute name that reaches a forbidden API -> the dotted forbidden name it reaches."""
    names: dict[str, str] = {}
    for dotted in forbidden:
        short = dotted.rpartition(".")[2]
        names[short] = dotted
    for dotted in forbidden:
        short = dotted.rpartition(".")[2]
        extra = BUILT_ON.get(short, ())
        if short in BUILT_ON:
            extra = (*extra, *TRANSFORMER_CLASSES)
        for name in extra:
            names.setdefault(name, dotted)
    return names


class _Clock:
    """A deadline, looked at every few thousand nodes."""

    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds
        self.count = 0

    def tick(self) -> None:
        self.count += 1
        if self.count % _CHECK_EVERY == 0 and time.monotonic() > self.deadline:
            raise ScanRefused(f"it takes the grader more than {SCAN_SECONDS:g} s to check")


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _is_main_guard(node: ast.AST) -> bool:
    """``if __name__ == "__main__":``: code that runs only when the file is run as a script."""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    parts = [node.test.left, *node.test.comparators]
    return (any(isinstance(p, ast.Name) and p.id == "__name__" for p in parts)
            and any(isinstance(p, ast.Constant) and p.value == "__main__" for p in parts))


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _is_getattr(node: ast.Call) -> bool:
    return isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) >= 2


def _why_denied(attr: str) -> str:
    return "private internals" if attr.startswith("_") else "it runs or loads code the grader cannot read"


def _is_module(path: str) -> bool:
    """Whether a dotted path names a module (or torch.ops, a namespace of operators), not a value."""
    import sys

    return path in sys.modules or path.split(".")[:2] == ["torch", "ops"] or path in ALLOWED_MODULES


def _pure_alias(node: ast.AST) -> bool:
    """``name = a.b.c`` (or a constant): nothing of the learner's runs when it is evaluated."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, (ast.Name, ast.Constant))


class SourceScan:
    """What each graded function of one learner module can reach, from its source (bytes or text)."""

    def __init__(self, source: bytes | str, forbidden: list[str]):
        self.names = forbidden_names(list(forbidden))
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
        self.imports: list[ast.AST] = []                 # module-level imports (run at import too)
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
                if _is_getattr(node) or (isinstance(node.func, ast.Name) and node.func.id == "hasattr"
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
                    if _pure_alias(value) and name in self.strict:
                        self.strict.add(target)
                    todo.append(target)

    def _import_call_module(self, value: ast.AST) -> str | None:
        """``__import__("torch").nn`` or ``importlib.import_module("torch.nn")``: the literal module."""
        while isinstance(value, (ast.Attribute, ast.Subscript)):
            value = value.value
        if isinstance(value, ast.Call) and value.args:
            func = value.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in ("__import__", "import_module"):
                return _literal(value.args[0])
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
        elif (isinstance(node, ast.Assign) and _pure_alias(node.value)
              and all(isinstance(t, ast.Name) for t in node.targets)):
            for target in node.targets:                  # fn = torch.nn.functional: a definition
                self.defs.setdefault(target.id, []).append(node)
        elif _is_main_guard(node):
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

    def _scan_from(self, function: str) -> list[Finding]:
        clock = _Clock(SCAN_SECONDS)
        found: list[Finding] = []
        seen_nodes: set[int] = set()
        seen_names: set[str] = set()
        todo_nodes: list[ast.AST] = list(self.roots)
        todo_names = [function]
        for node in self.imports:                        # which modules: checked whether used or not
            found += [f for f in self._import(node) if not f.api]
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

    # -- the checks on one node ----------------------------------------------------------------

    def _check(self, node: ast.AST) -> list[Finding]:
        if isinstance(node, ast.Attribute):
            return self._attribute(node.value, node.attr, getattr(node, "lineno", 0)) + self._escapes(node)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return self._import(node)
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.Name):
            return self._name(node) + self._escapes(node)
        return []

    def _attribute(self, base: ast.AST, attr: str, line: int) -> list[Finding]:
        """``base.attr`` (written out, or as getattr(base, "attr"))."""
        root = self._root_name(base)
        if attr in self.names and not (root in self.own and root not in self.modules):
            return [Finding(self.names[attr], f"refers to {attr}", line)]
        if _is_dunder(attr) and attr not in DUNDERS_ALLOWED:
            return [Finding("", f"line {line} reads .{attr}, which reaches objects by names the grader "
                                "cannot follow", line)]
        module = self._module_of(base)
        if module is None:
            return []
        top = module.split(".")[0]
        if top == "sys" and attr not in SYS_ALLOWED:
            return [Finding("", f"line {line} uses sys.{attr} (sys.modules reaches any module by a name "
                                "built at run time)", line)]
        if top == "importlib" and attr not in IMPORTLIB_ALLOWED:
            return [Finding("", f"line {line} uses importlib.{attr}", line)]
        if attr in DENIED_ATTRIBUTES.get(top, ()) or (top == "torch" and attr.startswith("_")):
            return [Finding("", f"line {line} uses {top}'s {attr} ({_why_denied(attr)})", line)]
        return []

    def _escapes(self, node: ast.Name | ast.Attribute) -> list[Finding]:
        """A module itself (``F``, ``torch.nn``) passed around as a value: where it goes, the grader
        can no longer see what is looked up on it."""
        if id(node) in self.bases or not isinstance(node.ctx, ast.Load):
            return []
        path = self._strict_path(node)
        if path is None or not _is_module(path):
            return []
        line = getattr(node, "lineno", 0)
        return [Finding("", f"line {line} passes the module {path} around as a value; use it directly "
                            "(F.softmax(...), not helper(F))", line)]

    def _strict_path(self, node: ast.AST) -> str | None:
        """The dotted module path of ``F`` or ``torch.nn.functional`` (names bound to modules only)."""
        attrs: list[str] = []
        while isinstance(node, ast.Attribute):
            attrs.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.strict or node.id not in self.modules:
            return None
        return ".".join([self.modules[node.id], *reversed(attrs)])

    def _import(self, node: ast.Import | ast.ImportFrom) -> list[Finding]:
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            return [p for p in (self._module_problem(a.name, line) for a in node.names) if p]
        if node.level:
            return [Finding("", f"line {line} imports from your own folder; put everything in this one file", line)]
        module = node.module or ""
        problem = self._module_problem(module, line)
        if problem:
            return [problem]
        found = []
        for alias in node.names:
            if alias.name == "*":
                found.append(Finding("", f"line {line}: `from {module} import *` hides which names it "
                                         "binds; import the names you use", line))
            elif alias.name in self.names:
                found.append(Finding(self.names[alias.name], f"imports {alias.name}", line))
            else:
                problem = self._module_problem(f"{module}.{alias.name}", line)
                if problem:
                    found.append(problem)
        return found

    def _module_problem(self, dotted: str, line: int) -> Finding | None:
        """Why importing ``dotted`` (a module, or a name from one) cannot be verified, or None."""
        parts = dotted.split(".")
        if parts[0] not in ALLOWED_MODULES:
            return Finding("", f"line {line} imports {dotted}, which the grader cannot check "
                               f"(allowed: {', '.join(sorted(m for m in ALLOWED_MODULES if m != '__future__'))})",
                           line)
        denied = DENIED_ATTRIBUTES.get(parts[0], set())
        for part in parts[1:]:
            if part in denied or (parts[0] == "torch" and part.startswith("_")):
                return Finding("", f"line {line} imports {dotted} ({_why_denied(part)})", line)
            if parts[0] == "sys" and part not in SYS_ALLOWED:
                return Finding("", f"line {line} imports sys.{part}", line)
            if parts[0] == "importlib" and part not in IMPORTLIB_ALLOWED:
                return Finding("", f"line {line} imports importlib.{part}", line)
        return None

    def _call(self, node: ast.Call) -> list[Finding]:
        line = getattr(node, "lineno", 0)
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name in ("__import__", "import_module") and (isinstance(func, ast.Attribute) or name not in self.own):
            module = _literal(node.args[0]) if node.args else None
            if module is None:
                return [Finding("", f"line {line} imports a module whose name is computed at run time", line)]
            problem = self._module_problem(module, line)
            return [problem] if problem else []
        if not isinstance(func, ast.Name) or func.id in self.defs or func.id in self.modules:
            return []                                    # a method, or the learner's own name
        if func.id in NAME_TAKING:
            position = NAME_TAKING[func.id]
            attr = _literal(node.args[position]) if len(node.args) > position else None
            if attr is None:
                if func.id == "hasattr":
                    return []
                return [Finding("", f"line {line} calls {func.id} with a name computed at run time; write the "
                                    "attribute out (F.softmax, not getattr(F, name))", line)]
            return self._attribute(node.args[0], attr, line)
        if func.id in REFLECTIVE_BUILTINS:
            return [Finding("", f"line {line} calls {func.id}(), which runs or looks up code the grader "
                                "cannot read", line)]
        return []

    def _name(self, node: ast.Name) -> list[Finding]:
        line = getattr(node, "lineno", 0)
        if node.id in self.defs or node.id in self.modules:
            return []
        if node.id in REFLECTIVE_BUILTINS:
            if id(node) in self.bases:                   # called: _call checks the call
                return []
            return [Finding("", f"line {line} uses the built-in {node.id} as a value", line)]
        if _is_dunder(node.id) and node.id not in DUNDERS_ALLOWED:
            return [Finding("", f"line {line} uses {node.id}, which the grader cannot follow", line)]
        return []

    # -- where an expression starts -----------------------------------------------------------

    def _root_name(self, node: ast.AST) -> str | None:
        """The name an expression such as ``torch.ops.aten``, ``A().f`` or ``getattr(F, "x")`` starts from."""
        while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
            if isinstance(node, ast.Call):
                node = node.args[0] if _is_getattr(node) else node.func
            else:
                node = node.value
        return node.id if isinstance(node, ast.Name) else None

    def _module_of(self, node: ast.AST) -> str | None:
        """The allowed module an attribute chain is on (``F`` -> torch.nn.functional), else None."""
        while isinstance(node, (ast.Attribute, ast.Subscript)) or (isinstance(node, ast.Call) and _is_getattr(node)):
            node = node.args[0] if isinstance(node, ast.Call) else node.value
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id == "__import__":
                return _literal(node.args[0]) if node.args else None
            if isinstance(node.func, ast.Attribute) and node.func.attr == "import_module":
                return _literal(node.args[0]) if node.args else None
            return self._module_of(node.func)
        return self.modules.get(node.id) if isinstance(node, ast.Name) else None


class RefusedScan:
    """The scan of a file the grader could not check: every graded function gets the refusal."""

    def __init__(self, why: str):
        self.why = why

    def findings(self, function: str) -> list[Finding]:
        return [Finding("", self.why)]

    def reached_from(self, function: str) -> list[str]:
        return []

    def unverifiable(self, function: str) -> list[Finding]:
        return self.findings(function)


def scan_file(path: Path, forbidden: list[str], data: bytes | None = None) -> SourceScan | RefusedScan:
    """The scan of the learner's file (of ``data``, its snapshot taken when the check began, when
    given: src/lumen_ex/core/snapshot.py); a file that cannot be read or checked within the bounds is
    refused (never skipped). At most MAX_SOURCE_BYTES + 1 bytes are ever read."""
    try:
        data = _read_bounded(Path(path), MAX_SOURCE_BYTES + 1) if data is None else data
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


def _read_bounded(path: Path, limit: int) -> bytes:
    """At most ``limit`` bytes of a regular file; never blocks on a FIFO or reads a device (a file
    over the limit is cut there, and then refused by the scan's own size bound)."""
    from lumen_ex.core import bounded

    fd = bounded.open_regular(Path(path), 1 << 62, name=Path(path).name)
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)

"""The checks the source scan makes on one syntax node of code that can run: a forbidden API
however it is named, and code it cannot follow (names computed at run time, reflective built-ins,
imports it cannot check, a module passed around as a value).

:class:`NodeChecks` is a part of :class:`lumen_ex.harness.source_scan.SourceScan`, which indexes
the module (the attributes below) and walks the code a graded function reaches, node by node.
"""

from __future__ import annotations

import ast

from lumen_ex.harness.scan_rules import (
    ALLOWED_MODULES,
    DENIED_ATTRIBUTES,
    DUNDERS_ALLOWED,
    MODULE_ATTRIBUTES,
    NAME_RESOLVERS,
    NAME_TAKING,
    REFLECTIVE_BUILTINS,
    Finding,
    is_dunder,
    is_getattr,
    is_module,
    is_private,
    literal,
    why_denied,
)


class NodeChecks:
    """The per-node checks of a source scan, on the index the scan made of the module."""

    names: dict[str, str]           # attribute name -> the dotted forbidden API it reaches
    defs: dict[str, list[ast.AST]]  # module-level name -> the nodes that define it
    own: set[str]                   # names bound only by a module-level def / class
    modules: dict[str, str]         # name -> the module it is bound to, or came from
    strict: set[str]                # names bound to a module itself (not a value)
    bases: set[int]                 # nodes used as `x` in x.attr or x(...)

    def _check(self, node: ast.AST) -> list[Finding]:
        if isinstance(node, ast.Attribute):
            read = id(node) not in self.bases      # q.grad, not q.grad() nor q.grad.x
            return self._attribute(node.value, node.attr, getattr(node, "lineno", 0), read) + self._escapes(node)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return self._import(node)
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.Name):
            return self._name(node) + self._escapes(node)
        return []

    def _attribute(self, base: ast.AST, attr: str, line: int, read: bool = False) -> list[Finding]:
        """``base.attr`` (written out, or as getattr(base, "attr")); ``read``: only read, not called."""
        root = self._root_name(base)
        if attr in self.names and not (root in self.own and root not in self.modules):
            return [Finding(self.names[attr], f"reads .{attr}" if read else f"refers to {attr}", line, read)]
        if is_dunder(attr) and attr not in DUNDERS_ALLOWED:
            return [Finding("", f"line {line} reads .{attr}, which reaches objects by names the grader "
                                "cannot follow", line)]
        if is_private(attr):
            return [Finding("", f"line {line} reads .{attr}: private names (a leading underscore) are refused on "
                                "every object, since they reach internals the grader cannot check; name your "
                                "own attributes without one", line)]
        path = self._strict_path(base)                   # on a module itself: its allow-list
        if path in MODULE_ATTRIBUTES and attr not in MODULE_ATTRIBUTES[path]:
            return [Finding("", f"line {line} uses {path}.{attr}, which the grader cannot check "
                                f"(allowed from {path}: {', '.join(sorted(MODULE_ATTRIBUTES[path]))})", line)]
        module = self._module_of(base)
        if module is None:
            return []
        top = module.split(".")[0]
        if attr in DENIED_ATTRIBUTES.get(top, ()):
            return [Finding("", f"line {line} uses {top}'s {attr} ({why_denied(attr)})", line)]
        return []

    def _escapes(self, node: ast.Name | ast.Attribute) -> list[Finding]:
        """A module itself (``F``, ``torch.nn``) passed around as a value: where it goes, the grader
        can no longer see what is looked up on it."""
        if id(node) in self.bases or not isinstance(node.ctx, ast.Load):
            return []
        path = self._strict_path(node)
        line = getattr(node, "lineno", 0)
        if path in NAME_RESOLVERS:
            return [Finding("", f"line {line} passes {path} around as a value; call it where you name it, "
                                "with the module's name written out", line)]
        if path is None or not is_module(path):
            return []
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
        for part in parts[1:]:
            if is_private(part) or (is_dunder(part) and part not in DUNDERS_ALLOWED):
                return Finding("", f"line {line} imports {dotted} (private internals)", line)
            if part in DENIED_ATTRIBUTES.get(parts[0], ()):
                return Finding("", f"line {line} imports {dotted} ({why_denied(part)})", line)
        allowed = MODULE_ATTRIBUTES.get(parts[0])
        if allowed is not None and len(parts) > 1 and parts[1] not in allowed:
            return Finding("", f"line {line} imports {dotted}, which the grader cannot check "
                               f"(allowed from {parts[0]}: {', '.join(sorted(allowed))})", line)
        return None

    def _call(self, node: ast.Call) -> list[Finding]:
        line = getattr(node, "lineno", 0)
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name in ("__import__", "import_module") and (isinstance(func, ast.Attribute) or name not in self.own):
            module = literal(node.args[0]) if node.args else None
            if module is None:
                return [Finding("", f"line {line} imports a module whose name is computed at run time", line)]
            problem = self._module_problem(module, line)
            return [problem] if problem else []
        if not isinstance(func, ast.Name) or func.id in self.defs or func.id in self.modules:
            return []                                    # a method, or the learner's own name
        if func.id in NAME_TAKING:
            position = NAME_TAKING[func.id]
            attr = literal(node.args[position]) if len(node.args) > position else None
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
        if is_dunder(node.id) and node.id not in DUNDERS_ALLOWED:
            return [Finding("", f"line {line} uses {node.id}, which the grader cannot follow", line)]
        return []

    # -- where an expression starts -----------------------------------------------------------

    def _root_name(self, node: ast.AST) -> str | None:
        """The name an expression such as ``torch.ops.aten``, ``A().f`` or ``getattr(F, "x")`` starts from."""
        while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
            if isinstance(node, ast.Call):
                node = node.args[0] if is_getattr(node) else node.func
            else:
                node = node.value
        return node.id if isinstance(node, ast.Name) else None

    def _module_of(self, node: ast.AST) -> str | None:
        """The allowed module an attribute chain is on (``F`` -> torch.nn.functional), else None."""
        while isinstance(node, (ast.Attribute, ast.Subscript)) or (isinstance(node, ast.Call) and is_getattr(node)):
            node = node.args[0] if isinstance(node, ast.Call) else node.value
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id == "__import__":
                return literal(node.args[0]) if node.args else None
            if isinstance(node.func, ast.Attribute) and node.func.attr == "import_module":
                return literal(node.args[0]) if node.args else None
            return self._module_of(node.func)
        return self.modules.get(node.id) if isinstance(node, ast.Name) else None

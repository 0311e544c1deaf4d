"""Which forbidden APIs a graded function refers to, read from the learner's source by the harness.

The worker records forbidden calls as they happen (harness/worker.py), but it shares its process
with the learner's code, which can erase that record after the fact
(tests/corpus/hostile/forbidden_evasion.py). The source file cannot: this scan runs in the trusted
harness, parses it (never runs it) and finds, in a graded function and in every module-level
function, class and name that function uses (transitively), a reference to a forbidden API:

- an attribute of that name on torch, however it is reached: ``F.scaled_dot_product_attention``,
  ``torch._C._nn.scaled_dot_product_attention``, ``torch.ops.aten.scaled_dot_product_attention``,
  ``nn.MultiheadAttention`` (an attribute of the same name on anything else, such as the learner's
  own ``self.scaled_dot_product_attention``, is not torch's);
- a name imported from torch under any alias: ``from torch.nn.functional import
  scaled_dot_product_attention as fused``;
- the API's name as a string given to getattr on torch: ``getattr(F, "scaled_dot_product_attention")``.

Code the graded functions never reach (an ``if __name__ == "__main__":`` self-test comparing with
the library, an unused helper) is not held against the learner. A name assembled at run time
(``"scaled_dot_product_" + "attention"``) escapes this scan; the worker's record catches that one.
"""

from __future__ import annotations

import ast
from pathlib import Path

from .wire import SDPA_KERNELS

MAX_SOURCE = 1 << 20


def forbidden_names(forbidden: list[str]) -> dict[str, str]:
    """The last component of each forbidden dotted name (and SDPA's kernels) -> the dotted name."""
    names: dict[str, str] = {}
    for dotted in forbidden:
        short = dotted.rpartition(".")[2]
        names[short] = dotted
        if short == "scaled_dot_product_attention":
            for kernel in SDPA_KERNELS:
                names.setdefault(kernel, dotted)
    return names


class SourceScan:
    """The forbidden APIs each function of one learner module can reach, from its source."""

    def __init__(self, source: str, forbidden: list[str]):
        self.names = forbidden_names(forbidden)
        self.tree = ast.parse(source)
        self.defs: dict[str, list[ast.AST]] = {}      # module-level name -> the nodes that define it
        self.aliases: dict[str, str] = {}             # module-level name bound to a forbidden import
        self.torch_names: set[str] = set()            # names bound to torch or one of its modules
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "torch":
                        self.torch_names.add(alias.asname or "torch")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
                self.torch_names.update(a.asname or a.name for a in node.names if a.name not in self.names)
        for node in self.tree.body:
            self._top_level(node)

    def _top_level(self, node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.defs.setdefault(node.name, []).append(node)
            self.aliases.pop(node.name, None)          # a def after an import shadows it
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        self.defs.setdefault(name.id, []).append(node)
                        if isinstance(node.value, (ast.Name, ast.Attribute)) and self._on_torch(node.value):
                            self.torch_names.add(name.id)          # fn = torch.nn.functional
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            for alias in node.names:
                if alias.name in self.names:
                    self.aliases[alias.asname or alias.name] = self.names[alias.name]
        elif isinstance(node, (ast.If, ast.Try, ast.With)) and not _is_main_guard(node):
            for child in ast.iter_child_nodes(node):   # definitions inside a module-level if / try
                if isinstance(child, ast.stmt):
                    self._top_level(child)
                elif isinstance(child, ast.ExceptHandler):
                    for stmt in child.body:
                        self._top_level(stmt)

    def reached_from(self, function: str) -> list[str]:
        """The forbidden APIs (dotted) that ``function`` refers to, directly or through the module-level
        functions, classes and names it uses; in the order first met."""
        found: list[str] = []
        seen: set[str] = set()
        todo = [function]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in self.aliases:                   # imported from torch, not shadowed by a def
                found.append(self.aliases[name])
            for definition in self.defs.get(name, []):
                for node in ast.walk(definition):
                    if isinstance(node, ast.Attribute) and node.attr in self.names and self._on_torch(node.value):
                        found.append(self.names[node.attr])
                    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                          and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                          and node.args[1].value in self.names and self._on_torch(node.args[0])):
                        found.append(self.names[node.args[1].value])
                    elif isinstance(node, ast.Name) and node.id != name:
                        todo.append(node.id)
        return list(dict.fromkeys(found))

    def _on_torch(self, node: ast.AST) -> bool:
        """Whether an expression such as ``torch.ops.aten`` or ``F`` starts from a name bound to torch."""
        while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
            node = node.func if isinstance(node, ast.Call) else node.value
        return isinstance(node, ast.Name) and node.id in self.torch_names


def _is_main_guard(node: ast.AST) -> bool:
    """``if __name__ == "__main__":``: code that runs only when the file is run as a script."""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    parts = [node.test.left, *node.test.comparators]
    return (any(isinstance(p, ast.Name) and p.id == "__name__" for p in parts)
            and any(isinstance(p, ast.Constant) and p.value == "__main__" for p in parts))


def scan_file(path: Path, forbidden: list[str]) -> SourceScan | None:
    """The scan of the learner's file, or None when it cannot be read or parsed (the import then
    fails in the worker and is reported there)."""
    try:
        data = Path(path).read_bytes()
        if len(data) > MAX_SOURCE:
            return None
        return SourceScan(data.decode("utf-8", errors="replace"), list(forbidden))
    except (OSError, SyntaxError, ValueError, RecursionError):
        return None

"""The shape of the package, measured from its source: modules per folder, the largest modules,
import cycles between our own modules, and imports of our own modules made inside functions.

    python bench/architecture.py [ROOT]

ROOT is a checkout (default: this one). Works on the src layout (src/lumen_ex) and on the older
layout whose top-level folders setuptools mapped into lumen_ex (pyproject's package-dir), so the
two can be compared. Prints numbers only; tests/unit/test_architecture.py holds the rules.
"""

from __future__ import annotations

import ast
import collections
import sys
import tomllib
from pathlib import Path


def package_roots(root: Path) -> dict[str, Path]:
    """Import name of each package folder -> its folder on disk."""
    if (root / "src" / "lumen_ex").is_dir():
        return {"lumen_ex": root / "src" / "lumen_ex"}
    config = tomllib.loads((root / "pyproject.toml").read_text())
    dirs = config["tool"]["setuptools"].get("package-dir", {})
    return {name: root / folder for name, folder in dirs.items()}


def modules(root: Path) -> dict[str, Path]:
    """Every module of lumen_ex: dotted name -> file (the first mapping that claims a file wins)."""
    found: dict[str, Path] = {}
    for pkg, folder in sorted(package_roots(root).items(), key=lambda kv: -len(kv[0])):
        for path in sorted(folder.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if any(p.endswith(".egg-info") for p in rel.parts):
                continue
            name = ".".join([pkg, *parts])
            if pkg == "lumen_ex" and parts and f"lumen_ex.{parts[0]}" in package_roots(root):
                continue   # a folder mapped elsewhere
            found.setdefault(name, path)
    return found


def imports(name: str, path: Path, known: set[str]) -> list[tuple[str, bool]]:
    """(imported module of ours, made inside a function?) for every import in the file."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: list[tuple[str, bool]] = []

    def resolve(target: str) -> str | None:
        while target and target not in known:
            target = target.rsplit(".", 1)[0] if "." in target else ""
        return target or None

    def visit(node, nested: bool):
        for child in ast.iter_child_nodes(node):
            inner = nested or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.startswith("lumen_ex") and (hit := resolve(alias.name)):
                        out.append((hit, nested))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - child.level + 1]
                    mod = ".".join(base + ([child.module] if child.module else []))
                else:
                    mod = child.module or ""
                if mod.startswith("lumen_ex"):
                    hits = {resolve(f"{mod}.{alias.name}") if f"{mod}.{alias.name}" in known else resolve(mod)
                            for alias in child.names} - {None}
                    out.extend((hit, nested) for hit in sorted(hits))
            visit(child, inner)

    visit(tree, False)
    return out


def statements_inside(name: str, path: Path, known: set[str]):
    """The import statements inside functions that import one of our modules other than ``name``."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    inside = {id(node): node for fn in ast.walk(ast.parse(path.read_text()))
              if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) for node in ast.walk(fn)}
    for node in inside.values():
        if isinstance(node, ast.Import) and any(a.name.startswith("lumen_ex") for a in node.names):
            yield node
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            if mod.startswith("lumen_ex"):
                yield node


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def measure(root: Path) -> dict:
    mods = modules(root)
    known = set(mods)
    top: dict[str, set[str]] = collections.defaultdict(set)
    every: dict[str, set[str]] = collections.defaultdict(set)
    nested = 0      # import statements inside functions that name one of our modules (not the module itself)
    for name, path in mods.items():
        statements = imports(name, path, known)
        for target, inside in statements:
            if target == name:
                continue
            every[name].add(target)
            if not inside:
                top[name].add(target)
        nested += sum(1 for s in statements_inside(name, path, known))
    per_folder = collections.Counter(str(p.parent.relative_to(root)) for p in mods.values())
    sizes = sorted(((len(p.read_text().splitlines()), str(p.relative_to(root))) for p in mods.values()),
                   reverse=True)
    return {"modules": len(mods), "per_folder": dict(sorted(per_folder.items())), "largest": sizes[:8],
            "over_400": [s for s in sizes if s[0] > 400], "function_level_imports": nested,
            "cycles_at_import": cycles(top), "cycles_with_function_imports": cycles(every)}


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]).resolve()
    m = measure(root)
    print(f"{root}: {m['modules']} modules")
    for folder, n in m["per_folder"].items():
        print(f"  {n:3d}  {folder}/")
    print("largest:", ", ".join(f"{p} ({n})" for n, p in m["largest"][:5]))
    print(f"modules over 400 lines: {len(m['over_400'])}", "".join(f"\n  {p} ({n})" for n, p in m["over_400"]))
    print(f"function-level imports of our own modules: {m['function_level_imports']}")
    print(f"import cycles (module-level imports): {len(m['cycles_at_import'])}",
          "".join(f"\n  {' <-> '.join(c)}" for c in m["cycles_at_import"]))
    print(f"import cycles (function-level imports included): {len(m['cycles_with_function_imports'])}",
          "".join(f"\n  {len(c)} modules: {', '.join(c[:6])}{' ...' if len(c) > 6 else ''}"
                  for c in m["cycles_with_function_imports"]))


if __name__ == "__main__":
    main()

"""What a kernel file may hold (exercise.toml ``kernel = "triton"``), proven from its source by the harness.

A Triton kernel runs as Python in Triton's interpreter on the CPU, in the worker's process: code
beside it could write the outputs itself or patch the interpreter, and the worker could not tell.
So the file is held to an allow-list, checked on the exact bytes the worker imports (never run here):

- at the top: imports of ``triton``, ``triton.language`` and ``math`` (any alias), a docstring,
  constants (a name bound to a number, a string or a bool, or to ``tl.constexpr(<one of those>)``,
  the only kind a kernel may read: Triton's compiler refuses the others) and functions decorated
  with exactly ``@triton.jit``; nothing else runs when the file is imported;
- a kernel's parameters: no defaults but literals, annotations only ``tl.constexpr``;
- in a kernel's body: the names of its parameters and locals, the file's constexpr constants and kernels,
  the modules above and a few built-ins (``range``, ``min``, ``max``, ``float``, ``int``, ``abs``,
  ``len``); public attributes of ``triton.language`` and ``math``, of ``triton`` only
  TRITON_ATTRIBUTES, and on a value (a block of numbers) only those of TENSOR_ATTRIBUTES; no
  assignment to an attribute or an item; no import, class, global, try, with, lambda, yield or await,
  and no raise but the stub's ``raise NotImplementedError("...")``.

Anything else is refused, with its line: "cannot be verified". The scan is bounded like the source
scan of the other exercises (src/lumen_ex/harness/source_scan.py: MAX_SOURCE_BYTES, MAX_NODES).
"""

from __future__ import annotations

import ast

from lumen_ex.harness.source_scan import MAX_NODES, MAX_SOURCE_BYTES

MODULES = {"triton", "triton.language", "math"}
# On ``triton`` itself, only these (the rest reaches the runtime and the interpreter); on
# ``triton.language`` and ``math``, any public name.
TRITON_ATTRIBUTES = {"cdiv", "next_power_of_2", "language"}
BUILTINS = {"range", "min", "max", "float", "int", "abs", "len", "True", "False", "None"}
# What a kernel may read on a value it computed (a block, a pointer, a dtype): Triton's own methods.
TENSOR_ATTRIBUTES = {"to", "T", "dtype", "element_ty", "shape", "reshape", "trans", "permute", "broadcast_to",
                     "expand_dims", "split", "sum", "max", "min", "argmax", "argmin", "exp", "exp2", "log",
                     "log2", "sqrt", "abs", "sigmoid", "cast", "numel", "view", "cumsum", "primitive_bitwidth"}
REFUSED_NODES = (ast.Import, ast.ImportFrom, ast.ClassDef, ast.Global, ast.Nonlocal, ast.Try, ast.With,
                 ast.AsyncWith, ast.Lambda, ast.Yield, ast.YieldFrom, ast.Await, ast.AsyncFor, ast.AsyncFunctionDef,
                 ast.Delete, ast.NamedExpr)


def problems(source: bytes, file: str) -> list[str]:
    """Why ``source`` is not a kernel file the grader can trust (empty when it is): 'line N: ...'."""
    if len(source) > MAX_SOURCE_BYTES:
        return [f"is over {MAX_SOURCE_BYTES} bytes, too large to check"]
    try:
        tree = ast.parse(source, file)
    except SyntaxError:
        return []                    # the import fails and says so, with its line
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        return ["is too large to check"]
    found: list[str] = []
    modules: set[str] = set()        # the names the imports bind
    constexprs: set[str] = set()     # NAME = tl.constexpr(literal): what a kernel may read
    plain: set[str] = set()          # NAME = literal: Triton's compiler refuses it in a kernel
    jitted: set[str] = set()         # the file's kernels
    kernels: list[ast.FunctionDef] = []
    for i, node in enumerate(tree.body):
        line = f"line {node.lineno}"
        if isinstance(node, ast.Import) and all(a.name in MODULES for a in node.names):
            modules.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif (isinstance(node, ast.ImportFrom) and node.level == 0 and
              (node.module == "__future__" or all(f"{node.module}.{a.name}" in MODULES for a in node.names))):
            modules.update(a.asname or a.name for a in node.names if node.module != "__future__")
        elif i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            pass                                                       # the docstring
        elif (isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None
              and (_constant(node.value) or _constexpr(node.value, modules))
              and all(isinstance(t, ast.Name) for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))):
            names = {t.id for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                     if isinstance(t, ast.Name)}
            (constexprs if _constexpr(node.value, modules) else plain).update(names)
        elif isinstance(node, ast.FunctionDef) and _is_jit(node.decorator_list, modules):
            jitted.add(node.name)
            kernels.append(node)
        else:
            found.append(f"{line}: only imports of triton and math, constants and @triton.jit functions may be at "
                         "the top of the file")
    for kernel in kernels:
        found += _kernel_problems(kernel, modules, constexprs | jitted, plain)
    return found


def _constant(node: ast.AST | None) -> bool:
    """A literal number, string or bool (negated or not), or ``float("inf")``, ``float("-inf")``, ``float("nan")``."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "float"
            and len(node.args) == 1 and not node.keywords and isinstance(node.args[0], ast.Constant)):
        return node.args[0].value in ("inf", "-inf", "nan")
    return isinstance(node, ast.Constant) and type(node.value) in (int, float, str, bool)


def _constexpr(node: ast.AST | None, modules: set[str]) -> bool:
    """``tl.constexpr(<literal>)`` (or ``triton.language.constexpr``): a global a kernel may read."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "constexpr"
            and _on_module(node.func, modules) and len(node.args) == 1 and not node.keywords
            and _constant(node.args[0]))


def _is_jit(decorators: list[ast.expr], modules: set[str]) -> bool:
    return (len(decorators) == 1 and isinstance(d := decorators[0], ast.Attribute) and d.attr == "jit"
            and isinstance(d.value, ast.Name) and d.value.id == "triton" and "triton" in modules)


def _kernel_problems(kernel: ast.FunctionDef, modules: set[str], top: set[str], plain: set[str]) -> list[str]:
    found = []
    args = kernel.args
    params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    if args.vararg or args.kwarg:
        found.append(f"line {kernel.lineno}: {kernel.name} takes *args or **kwargs")
    for default in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
        if not _constant(default):
            found.append(f"line {default.lineno}: a default of {kernel.name} is not a literal")
    for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
        ann = a.annotation
        if ann is not None and not (isinstance(ann, ast.Attribute) and ann.attr == "constexpr"
                                    and isinstance(ann.value, ast.Name) and ann.value.id in modules):
            found.append(f"line {ann.lineno}: the annotation of {a.arg} is not tl.constexpr")
    body = [node for stmt in kernel.body for node in ast.walk(stmt)]     # (the decorator and defaults: above)
    local = {n.id for n in body if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    known = params | local | top | modules | BUILTINS
    for node in body:
        where = f"line {getattr(node, 'lineno', kernel.lineno)}"
        if isinstance(node, ast.Raise) and not _not_written_yet(node):
            found.append(f"{where}: a kernel raises nothing but the stub's NotImplementedError")
        elif isinstance(node, ast.Name) and node.id == "NotImplementedError":
            pass
        elif isinstance(node, REFUSED_NODES):
            found.append(f"{where}: {type(node).__name__.lower()} is not allowed in a kernel")
        elif isinstance(node, ast.FunctionDef):
            found.append(f"{where}: a function inside a kernel: write it as a @triton.jit function of its own")
        elif isinstance(node, ast.Name) and node.id in plain and node.id not in params | local:
            found.append(f"{where}: {node.id} is a plain constant, which Triton's compiler does not let a kernel "
                         f"read: write {node.id} = tl.constexpr(...)")
        elif isinstance(node, ast.Name) and node.id not in known:
            found.append(f"{where}: {node.id} is not a name a kernel may use")
        elif isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, ast.Store):
            found.append(f"{where}: a kernel writes its results with tl.store, never by assignment to an "
                         "attribute or an item")
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("_"):
                found.append(f"{where}: .{node.attr} is private")
            elif isinstance(node.value, ast.Name) and node.value.id == "triton" and node.attr not in TRITON_ATTRIBUTES:
                found.append(f"{where}: triton.{node.attr} is not for a kernel (triton.language and triton.cdiv are)")
            elif not _on_module(node, modules) and node.attr not in TENSOR_ATTRIBUTES:
                found.append(f"{where}: .{node.attr} is not one of Triton's block methods")
    return found


def _not_written_yet(node: ast.Raise) -> bool:
    """The stub's ``raise NotImplementedError("...")``."""
    exc = node.exc
    return (node.cause is None and isinstance(exc, ast.Call) and isinstance(exc.func, ast.Name)
            and exc.func.id == "NotImplementedError" and all(isinstance(a, ast.Constant) for a in exc.args)
            and not exc.keywords)


def _on_module(node: ast.Attribute, modules: set[str]) -> bool:
    """``tl.sum``, ``triton.language.float32``: an attribute chain that starts at an imported module."""
    base: ast.AST = node
    while isinstance(base, ast.Attribute):
        base = base.value
    return isinstance(base, ast.Name) and base.id in modules



def _function(source: bytes, name: str) -> ast.FunctionDef | None:
    """The top-level function ``name`` of ``source`` (None: none, or the file does not parse)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def parameters(source: bytes, kernel: str) -> list[str] | None:
    """The parameter names of the top-level function ``kernel`` of ``source``, in order (None: no such
    function): read from the source, since a Triton kernel object hides its signature."""
    node = _function(source, kernel)
    if node is None:
        return None
    args = node.args
    return [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]


def not_written(source: bytes, kernel: str) -> str | None:
    """The message of the stub's ``raise NotImplementedError("...")`` in ``kernel``'s body, if it has one
    (a compile cannot run a raise: the check says what the stub says instead)."""
    node = _function(source, kernel)
    for inner in ast.walk(node) if node is not None else ():
        if isinstance(inner, ast.Raise) and _not_written_yet(inner):
            args = inner.exc.args if isinstance(inner.exc, ast.Call) else []
            return str(args[0].value) if args and isinstance(args[0], ast.Constant) else ""
    return None

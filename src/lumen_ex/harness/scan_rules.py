"""What the source scan (src/lumen_ex/harness/source_scan.py) allows and forbids: which library
APIs are built on a forbidden one, which modules and attributes a solution may use, which built-ins
it refuses; the :class:`Finding` it reports, and the small tests on syntax nodes it shares."""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass

from lumen_ex.sandbox.inside.wire import SDPA_KERNELS

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


def is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def is_main_guard(node: ast.AST) -> bool:
    """``if __name__ == "__main__":``: code that runs only when the file is run as a script."""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    parts = [node.test.left, *node.test.comparators]
    return (any(isinstance(p, ast.Name) and p.id == "__name__" for p in parts)
            and any(isinstance(p, ast.Constant) and p.value == "__main__" for p in parts))


def literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def is_getattr(node: ast.Call) -> bool:
    return isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) >= 2


def why_denied(attr: str) -> str:
    return "private internals" if attr.startswith("_") else "it runs or loads code the grader cannot read"


def is_module(path: str) -> bool:
    """Whether a dotted path names a module (or torch.ops, a namespace of operators), not a value."""
    return path in sys.modules or path.split(".")[:2] == ["torch", "ops"] or path in ALLOWED_MODULES


def pure_alias(node: ast.AST) -> bool:
    """``name = a.b.c`` (or a constant): nothing of the learner's runs when it is evaluated."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, (ast.Name, ast.Constant))

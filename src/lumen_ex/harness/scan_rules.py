"""What the source scan (src/lumen_ex/harness/source_scan.py) allows: the modules a solution may
import and, for each, the attributes it may use (an allow-list for the standard library, where a few
names turn strings into code; a deny-list of loaders for torch and numpy, too large to list); the
built-ins it refuses; the :class:`Finding` it reports, and the small tests on syntax nodes it shares.

What an exercise forbids (and what each forbidden API is built on) is exercise data, not a table
here: src/lumen_ex/core/forbidden.py.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from lumen_ex.core import forbidden as forbidden_data

# Modules a solution may import. Others run code (or reach objects by name) the scan cannot see.
ALLOWED_MODULES = {"torch", "math", "numpy", "typing", "__future__", "functools", "itertools",
                   "dataclasses", "collections", "numbers", "warnings", "abc", "enum", "copy", "random",
                   "time", "contextlib", "operator", "einops", "importlib", "sys"}
# The standard-library modules above, each with the only attributes a solution may use: none of
# them evaluates a string as code or looks an object up by a name built at run time (typing's
# get_type_hints and ForwardRef do, functools.singledispatch evaluates annotations,
# operator.attrgetter and methodcaller look names up, importlib reaches any module).
MODULE_ATTRIBUTES = {
    "typing": {"Any", "Callable", "ClassVar", "Dict", "Final", "FrozenSet", "Generic", "Iterable", "Iterator",
               "List", "Literal", "Mapping", "MutableMapping", "MutableSequence", "NamedTuple", "NoReturn",
               "Optional", "Protocol", "Sequence", "Set", "Tuple", "Type", "TypeVar", "Union", "TYPE_CHECKING",
               "Hashable", "Sized", "Collection", "Generator", "Self", "cast", "overload", "final",
               "Annotated", "TypeAlias"},
    "functools": {"reduce", "partial", "lru_cache", "cache", "wraps", "cached_property", "total_ordering",
                  "cmp_to_key", "partialmethod"},
    "operator": {"add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "neg", "pos", "abs", "matmul",
                 "eq", "ne", "lt", "le", "gt", "ge", "and_", "or_", "xor", "not_", "invert", "index",
                 "itemgetter", "getitem", "iadd", "imul", "imatmul", "isub", "itruediv", "truth"},
    "itertools": {"accumulate", "chain", "combinations", "combinations_with_replacement", "compress", "count",
                  "cycle", "dropwhile", "filterfalse", "groupby", "islice", "pairwise", "permutations",
                  "product", "repeat", "starmap", "takewhile", "tee", "zip_longest"},
    "dataclasses": {"dataclass", "field", "fields", "asdict", "astuple", "replace", "is_dataclass",
                    "InitVar", "KW_ONLY", "MISSING", "Field"},
    "collections": {"namedtuple", "OrderedDict", "defaultdict", "deque", "Counter"},
    "numbers": {"Number", "Complex", "Real", "Rational", "Integral"},
    "warnings": {"warn", "catch_warnings", "simplefilter", "filterwarnings"},
    "abc": {"ABC", "ABCMeta", "abstractmethod"},
    "enum": {"Enum", "IntEnum", "Flag", "IntFlag", "StrEnum", "auto", "unique"},
    "copy": {"copy", "deepcopy"},
    "contextlib": {"contextmanager", "nullcontext", "suppress", "ExitStack", "closing"},
    "random": {"random", "seed", "randint", "uniform", "gauss", "choice", "choices", "shuffle", "sample",
               "Random", "randrange", "normalvariate"},
    "time": {"time", "perf_counter", "monotonic", "process_time", "sleep", "time_ns", "perf_counter_ns"},
    "sys": {"float_info", "maxsize", "version_info", "version", "platform", "stderr", "stdout", "byteorder"},
    "importlib": {"import_module"},   # with a literal name only, called where it is named (scan_checks.py)
    "__future__": {"annotations"},
}
# Attributes of torch and numpy (too large to list) that turn a string into an object, load code,
# reach every module, or run code in a thread or process of its own (torch.multiprocessing's pools
# and processes, torch.distributed's rpc: where the worker's own guards may not hold, such as
# grad mode, which every new thread starts with on). Every private name (a leading underscore) is
# refused on every object.
DENIED_ATTRIBUTES = {
    "torch": {"jit", "load", "package", "hub", "library", "compile", "fx", "export", "overrides",
              "serialization", "cpp_extension", "model_zoo", "load_library", "classes", "utils",
              "multiprocessing", "distributed"},
    "numpy": {"load", "ctypeslib", "lib", "f2py", "distutils", "testing", "fromfile"},
}
# Functions that turn a name into a module: usable only called where they are named, with a literal.
NAME_RESOLVERS = {"importlib.import_module"}
# Built-ins that run strings as code or look names up at run time.
REFLECTIVE_BUILTINS = {"eval", "exec", "compile", "globals", "locals", "vars", "open", "breakpoint",
                       "__import__", "getattr", "setattr", "delattr", "__build_class__", "input", "help"}
NAME_TAKING = {"getattr": 1, "setattr": 1, "delattr": 1, "hasattr": 1}
# The only dunder names a solution may read (docs/security.md); every other one is refused.
DUNDERS_ALLOWED = {"__init__", "__name__", "__qualname__", "__doc__", "__version__", "__class__",
                   "__call__", "__len__", "__repr__", "__str__", "__file__", "__all__", "__future__",
                   "__annotations__"}
# Module-level functions Python calls by itself, with a name it builds at run time.
MODULE_HOOKS = {"__getattr__", "__dir__"}


@dataclass(frozen=True)
class Finding:
    """One thing the scan found in code that can run: a forbidden API (``api`` is its dotted name) or
    code it cannot verify (``api`` is empty). ``why`` is a sentence for the learner."""

    api: str
    why: str
    line: int = 0
    read: bool = False      # the API's name as an attribute only read here (``q.grad``), not called


def forbidden_names(forbidden: Iterable[forbidden_data.ForbiddenAPI | str]) -> dict[str, str]:
    """Every attribute name that reaches a forbidden API -> the dotted forbidden API it reaches
    (the exercise data of src/lumen_ex/core/forbidden.py; a plain dotted string names just itself)."""
    return forbidden_data.attribute_names(forbidden_data.as_apis(forbidden))


def is_private(name: str) -> bool:
    """A private name (``_x``), not a dunder (``__x__``)."""
    return name.startswith("_") and not is_dunder(name)


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
    """Whether a dotted path names a module (or torch.ops, a namespace of operators), not a value.
    Its allowed library is imported first (the harness has torch already), so that the answer does
    not depend on whether this process happened to import it before the scan."""
    top = path.split(".")[0]
    if top in ALLOWED_MODULES and top not in sys.modules:
        with contextlib.suppress(ImportError):
            importlib.import_module(top)
    return path in sys.modules or path.split(".")[:2] == ["torch", "ops"] or path in ALLOWED_MODULES


def pure_alias(node: ast.AST) -> bool:
    """``name = a.b.c`` (or a constant): nothing of the learner's runs when it is evaluated."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, (ast.Name, ast.Constant))

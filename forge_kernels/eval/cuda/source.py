"""The ``load_inline`` calls of a CUDA candidate, read from its source text without running it.

A KernelBench CUDA candidate builds its extension at import time::

    source = '''__global__ void relu_kernel(...) {...}  torch::Tensor relu_cuda(torch::Tensor x) {...}'''
    cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"
    relu = load_inline(name="relu", cpp_sources=cpp_source, cuda_sources=source, functions=["relu_cuda"])

The evaluator builds every extension *before* candidate code runs (in its own process, with a
deadline and a cache), so the arguments must be knowable from the text: literals, module-level
constants, ``+`` of those and f-strings over them. :func:`extension_specs` resolves them into
:class:`ExtensionSpec` objects; the evaluation child later maps each real ``load_inline`` call to
its prebuilt library by :meth:`ExtensionSpec.key` (same arguments, same key).
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ExtensionSpec", "SpecError", "extension_specs", "spec_from_call", "ALLOWED_FLAG"]

# Compiler flags a candidate may pass: optimisation, macros, language level, fast math, register and
# PTX options, warnings. Anything else (include paths, output files, response files, linker
# scripts) could read or write outside the build directory and is refused.
ALLOWED_FLAG = re.compile(
    r"^(-O[0-3s]?|-[DU][A-Za-z_]\w*(=[\w.+-]*)?|-std=c\+\+\d\d|-{1,2}use_fast_math|-lineinfo|-w|-W[\w=-]*"
    r"|--expt-[\w-]+|-Xptxas=?-?[\w=,.-]+|--ptxas-options=[\w=,.-]+|-maxrregcount=\d+|--maxrregcount=\d+"
    r"|-f[\w-]+(=[\w.-]+)?|-march=[\w-]+|-ffast-math|-g|-l(cuda|cublas|cublasLt|curand|cusparse|cufft|cudnn))$"
)
_LOAD_INLINE_POSITIONAL = ("name", "cpp_sources", "cuda_sources")
_LOAD_INLINE_KEYWORDS = frozenset(
    {"name", "cpp_sources", "cuda_sources", "functions", "extra_cflags", "extra_cuda_cflags", "extra_ldflags",
     "extra_include_paths", "build_directory", "verbose", "with_cuda", "is_python_module",
     "with_pytorch_error_handling", "keep_intermediates", "use_pch", "no_implicit_headers"}
)
_NAME = re.compile(r"^[A-Za-z_]\w{0,63}$")


class SpecError(ValueError):
    """A ``load_inline`` call whose arguments cannot be used (unresolvable, malformed, not allowed)."""


def _as_list(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise SpecError(f"{what} must be a string or a list of strings, got {type(value).__name__}")


@dataclass(frozen=True)
class ExtensionSpec:
    """One ``load_inline`` call, normalised the way torch normalises it."""

    name: str
    cpp_sources: tuple[str, ...]
    cuda_sources: tuple[str, ...]
    functions: tuple[tuple[str, str], ...]  # (function name, docstring)
    extra_cflags: tuple[str, ...] = ()
    extra_cuda_cflags: tuple[str, ...] = ()
    extra_ldflags: tuple[str, ...] = ()
    with_pytorch_error_handling: bool = True
    no_implicit_headers: bool = False
    line: int = field(default=0, compare=False)

    @classmethod
    def from_arguments(cls, args: dict[str, Any], line: int = 0) -> "ExtensionSpec":
        """Validate ``load_inline`` keyword arguments (as resolved or as passed at run time)."""
        unknown = sorted(set(args) - _LOAD_INLINE_KEYWORDS)
        if unknown:
            raise SpecError(f"load_inline got unsupported argument(s) {unknown}")
        name = args.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise SpecError(f"load_inline name must be a C identifier of at most 64 characters, got {name!r}")
        if args.get("extra_include_paths"):
            raise SpecError("load_inline extra_include_paths is not allowed (the evaluator provides torch's "
                            "and CUDA's include paths)")
        if args.get("is_python_module", True) is not True:
            raise SpecError("load_inline is_python_module=False is not supported: the extension must be a "
                            "Python module")
        functions = args.get("functions")
        if isinstance(functions, str):
            functions = [functions]
        if isinstance(functions, dict):
            pairs = tuple((str(k), str(v)) for k, v in functions.items())
        else:
            pairs = tuple((f, f) for f in _as_list(functions, "load_inline functions"))
        for fname, _ in pairs:
            if not _NAME.match(fname):
                raise SpecError(f"load_inline functions entry {fname!r} is not a C++ identifier")
        flags = {}
        for key in ("extra_cflags", "extra_cuda_cflags", "extra_ldflags"):
            values = [v.strip() for v in _as_list(args.get(key), f"load_inline {key}") if v.strip()]
            bad = [v for v in values if not ALLOWED_FLAG.match(v)]
            if bad:
                raise SpecError(f"load_inline {key} {bad} not allowed; allowed: optimisation (-O3), macros (-DX=1), "
                                "-std=c++NN, --use_fast_math, -Xptxas options, -maxrregcount, warnings, and "
                                "-l for cuda/cublas/cublasLt/curand/cusparse/cufft/cudnn")
            flags[key] = tuple(values)
        cpp = tuple(_as_list(args.get("cpp_sources"), "load_inline cpp_sources"))
        cuda = tuple(_as_list(args.get("cuda_sources"), "load_inline cuda_sources"))
        if not any(src.strip() for src in cuda):
            raise SpecError(f"load_inline(name={name!r}) has no cuda_sources: write the kernel in CUDA")
        return cls(name=name, cpp_sources=cpp, cuda_sources=cuda, functions=pairs,
                   with_pytorch_error_handling=bool(args.get("with_pytorch_error_handling", True)),
                   no_implicit_headers=bool(args.get("no_implicit_headers", False)), line=line, **flags)

    def main_cpp(self) -> str:
        """``main.cpp`` exactly as ``load_inline`` writes it: the header, the C++ sources, the bindings."""
        parts = ["#include <torch/extension.h>", *self.cpp_sources]
        if self.functions:
            parts.append("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {")
            for fname, doc in self.functions:
                target = f"torch::wrap_pybind_function({fname})" if self.with_pytorch_error_handling else fname
                parts.append(f'm.def("{fname}", {target}, {json.dumps(doc)});')
            parts.append("}")
        return "\n".join(parts)

    def cuda_cu(self) -> str:
        """``cuda.cu`` as ``load_inline`` writes it (implicit headers first)."""
        head = [] if self.no_implicit_headers else ["#include <torch/types.h>", "#include <cuda.h>",
                                                    "#include <cuda_runtime.h>"]
        return "\n".join([*head, *self.cuda_sources])

    def key(self) -> str:
        """Content hash of everything that shapes the built library (not the line it came from)."""
        payload = json.dumps([self.name, self.cpp_sources, self.cuda_sources, self.functions, self.extra_cflags,
                              self.extra_cuda_cflags, self.extra_ldflags, self.with_pytorch_error_handling,
                              self.no_implicit_headers])
        return hashlib.sha256(payload.encode()).hexdigest()[:24]


# -- static resolution ------------------------------------------------------------------------------

class _Unresolved(Exception):
    """An argument of a load_inline call is not a literal or a module-level constant."""


def _module_constants(tree: ast.Module) -> dict[str, list[ast.expr]]:
    """Module-level ``NAME = expr`` assignments (every assignment kept: reassigned names are ambiguous)."""
    found: dict[str, list[ast.expr]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found.setdefault(node.targets[0].id, []).append(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            found.setdefault(node.target.id, []).append(node.value)
    return found


class _Resolver:
    def __init__(self, constants: dict[str, list[ast.expr]]) -> None:
        self.constants = constants
        self.depth = 0

    def value(self, node: ast.expr) -> Any:
        self.depth += 1
        try:
            if self.depth > 50:
                raise _Unresolved("constants nest too deeply")
            return self._value(node)
        finally:
            self.depth -= 1

    def _value(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, bool, int, float, type(None))):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.value(e) for e in node.elts]
        if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
            return {self.value(k): self.value(v) for k, v in zip(node.keys, node.values)}  # type: ignore[arg-type]
        if isinstance(node, ast.Name):
            assigned = self.constants.get(node.id)
            if not assigned:
                raise _Unresolved(f"{node.id!r} is not a module-level constant")
            if len(assigned) > 1:
                raise _Unresolved(f"{node.id!r} is assigned {len(assigned)} times at module level")
            return self.value(assigned[0])
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.value(node.left), self.value(node.right)
            if type(left) is type(right) and isinstance(left, (str, list)):
                return left + right
            raise _Unresolved("'+' of values that are not both strings or both lists")
        if isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                if isinstance(v, ast.Constant):
                    parts.append(str(v.value))
                elif isinstance(v, ast.FormattedValue) and v.format_spec is None and v.conversion == -1:
                    parts.append(str(self.value(v.value)))
                else:
                    raise _Unresolved("f-string with conversions or format specs")
            return "".join(parts)
        raise _Unresolved(f"{type(node).__name__} expression")


def _load_inline_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """Local names bound to ``load_inline`` and to the ``cpp_extension`` module."""
    functions, modules = {"load_inline"}, {"cpp_extension"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("cpp_extension"):
            functions.update(a.asname or a.name for a in node.names if a.name == "load_inline")
        elif isinstance(node, ast.ImportFrom) and node.module == "torch.utils":
            modules.update(a.asname or a.name for a in node.names if a.name == "cpp_extension")
        elif isinstance(node, ast.Import):
            modules.update(a.asname for a in node.names if a.name.endswith("cpp_extension") and a.asname)
    return functions, modules


def spec_from_call(call: ast.Call, resolver: _Resolver) -> ExtensionSpec:
    """The spec of one ``load_inline(...)`` call node."""
    args: dict[str, Any] = {}
    if len(call.args) > len(_LOAD_INLINE_POSITIONAL) or any(isinstance(a, ast.Starred) for a in call.args):
        raise SpecError(f"line {call.lineno}: pass load_inline arguments after cuda_sources by keyword")
    for pname, node in zip(_LOAD_INLINE_POSITIONAL, call.args):
        args[pname] = node
    for kw in call.keywords:
        if kw.arg is None:
            raise SpecError(f"line {call.lineno}: load_inline(**kwargs) cannot be read before running the code")
        args[kw.arg] = kw.value
    resolved: dict[str, Any] = {}
    for key, node in args.items():
        try:
            resolved[key] = resolver.value(node)
        except _Unresolved as err:
            raise SpecError(f"line {call.lineno}: load_inline argument {key!r} cannot be resolved from the source "
                            f"text ({err}); use string literals or module-level constants") from None
    try:
        return ExtensionSpec.from_arguments(resolved, line=call.lineno)
    except SpecError as err:
        raise SpecError(f"line {call.lineno}: {err}") from None


def extension_specs(tree: ast.Module) -> list[ExtensionSpec]:
    """Every ``load_inline`` call of a parsed candidate, resolved; raises :class:`SpecError` when a call
    cannot be resolved, ``cpp_extension.load`` (sources from files) is used, or there is none."""
    functions, modules = _load_inline_names(tree)
    resolver = _Resolver(_module_constants(tree))
    specs: list[ExtensionSpec] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        leaf = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        owner = func.value.attr if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute) else (
            func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else "")
        if (isinstance(func, ast.Name) and leaf in functions) or (leaf == "load_inline" and owner in modules):
            specs.append(spec_from_call(node, resolver))
        elif leaf in ("load", "CUDAExtension", "CppExtension") and owner in modules:
            raise SpecError(f"line {node.lineno}: cpp_extension.{leaf} is not supported; build the kernel with "
                            "load_inline(cpp_sources=..., cuda_sources=..., functions=[...])")
    if not specs:
        raise SpecError("no load_inline(...) call found: build the CUDA kernel with "
                        "torch.utils.cpp_extension.load_inline(cpp_sources=..., cuda_sources=..., functions=[...])")
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1 and len({s.key() for s in specs if s.name == n}) > 1})
    if dupes:
        raise SpecError(f"load_inline name(s) {dupes} used for different sources; give each extension its own name")
    return list({s.key(): s for s in specs}.values())

"""Static checks and rewrites of task source text (no code is executed here).

A KernelBench-format reference module must parse and define, at top level, a ``Model`` class and
the functions ``get_inputs`` and ``get_init_inputs``; a solution must define ``ModelNew``. Shape
overrides replace the values of top-level assignments (``batch_size = 16``) in the source text, so
globals derived from them later in the module (``hidden = 4 * dim``) follow the override.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping

__all__ = [
    "TaskFormatError",
    "apply_shape_overrides",
    "check_reference_source",
    "check_solution_source",
    "module_globals",
    "parse_source",
]


class TaskFormatError(ValueError):
    """A task file or row is malformed; the message names the origin and the problem."""


def parse_source(source: str, origin: str) -> ast.Module:
    """Parse ``source``; a syntax error becomes a :class:`TaskFormatError` naming ``origin`` and the line."""
    try:
        return ast.parse(source, filename=origin)
    except SyntaxError as err:
        line = (err.text or "").strip()
        where = f"line {err.lineno}" + (f", column {err.offset}" if err.offset else "")
        detail = f": {line!r}" if line else ""
        raise TaskFormatError(f"{origin}: syntax error at {where}: {err.msg}{detail}") from err


def _top_level_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    functions = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return classes, functions


def check_reference_source(source: str, origin: str, model_class: str = "Model") -> ast.Module:
    """Raise :class:`TaskFormatError` unless ``source`` is a valid reference module; returns its AST."""
    if not source.strip():
        raise TaskFormatError(f"{origin}: file is empty; expected a reference module defining "
                              f"class {model_class}, get_inputs() and get_init_inputs()")
    tree = parse_source(source, origin)
    classes, functions = _top_level_names(tree)
    missing = []
    if model_class not in classes:
        missing.append(f"class {model_class}")
    missing += [f"{fn}()" for fn in ("get_inputs", "get_init_inputs") if fn not in functions]
    if missing:
        raise TaskFormatError(f"{origin}: reference module does not define {', '.join(missing)} "
                              f"at top level (KernelBench format)")
    return tree


def check_solution_source(source: str, origin: str, new_class: str = "ModelNew") -> ast.Module:
    """Raise :class:`TaskFormatError` unless ``source`` parses and defines ``class ModelNew``."""
    tree = parse_source(source, origin)
    classes, _ = _top_level_names(tree)
    if new_class not in classes:
        raise TaskFormatError(f"{origin}: solution does not define class {new_class} at top level")
    return tree


def module_globals(tree: ast.Module) -> dict[str, ast.Assign | ast.AnnAssign]:
    """Top-level single-name assignments of a module (its shape constants), last one wins."""
    found: dict[str, ast.Assign | ast.AnnAssign] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found[node.targets[0].id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            found[node.target.id] = node
    return found


def apply_shape_overrides(source: str, overrides: Mapping[str, int | float], origin: str = "<task>") -> str:
    """Return ``source`` with each top-level ``name = ...`` in ``overrides`` set to the given value.

    The assignment's lines are replaced in place (padded with blank lines), so line numbers in
    tracebacks stay those of the original file. A name with no top-level assignment is an error.
    """
    if not overrides:
        return source
    tree = parse_source(source, origin)
    assigned = module_globals(tree)
    unknown = sorted(set(overrides) - set(assigned))
    if unknown:
        raise TaskFormatError(f"{origin}: shape override(s) {unknown} name no top-level assignment; "
                              f"module globals are {sorted(assigned)}")
    lines = source.splitlines(keepends=True)
    # Replace from the bottom up so earlier line numbers stay valid.
    for name in sorted(overrides, key=lambda n: assigned[n].lineno, reverse=True):
        node = assigned[name]
        value = overrides[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TaskFormatError(f"{origin}: shape override {name}={value!r} must be an int or float")
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        indent = lines[first][: node.col_offset]
        replacement = [f"{indent}{name} = {value!r}\n"] + ["\n"] * (last - first)
        lines[first : last + 1] = replacement
    return "".join(lines)

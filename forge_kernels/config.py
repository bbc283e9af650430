"""Typed configuration: YAML (OmegaConf) + CLI overrides -> validated pydantic models.

An app declares its settings as a tree of :class:`StrictModel` subclasses; every YAML section is
one model, so a typo or a wrong type is caught before anything starts::

    cfg = load_config(GRPOConfig, "configs/grpo_tiny.yaml", ["trainer.lr=3e-4", "~metrics.tensorboard"])

Overrides use OmegaConf's dotlist syntax (``key.sub=value``, YAML-typed values) plus ``~key``
to delete a key. Interpolation (``${trainer.lr}``) and resolvers (``${oc.env:HOME}``) resolve
before validation. Errors raise :class:`ConfigError`, whose message names the dotted key path,
the bad value, what was expected and, for unknown keys, the closest valid key.
"""

from __future__ import annotations

import argparse
import difflib
import sys
import asyncio
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = [
    "ConfigError",
    "StrictModel",
    "apply_overrides",
    "load_config",
    "run_app",
    "run_to_exit",
    "to_yaml",
]

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


class StrictModel(BaseModel):
    """Base for every settings model: unknown keys are errors, values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ConfigError(ValueError):
    """A configuration could not be loaded or did not validate; the message is for humans."""


def apply_overrides(cfg: DictConfig, overrides: Sequence[str]) -> DictConfig:
    """Apply ``key.sub=value`` and ``~key.sub`` overrides to ``cfg`` in order; returns a new config."""
    cfg = cfg.copy()
    for item in overrides:
        if item.startswith("~"):
            _delete_key(cfg, item[1:])
            continue
        if "=" not in item:
            raise ConfigError(
                f"override {item!r} is not of the form key.sub=value or ~key.sub"
            )
        key, _, raw = item.partition("=")
        if not key:
            raise ConfigError(f"override {item!r} has an empty key")
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        try:
            OmegaConf.update(cfg, key, value, merge=True, force_add=True)
        except OmegaConfBaseException as err:
            raise ConfigError(f"override {item!r} could not be applied: {err}") from err
    return cfg


def _delete_key(cfg: DictConfig, dotted: str) -> None:
    parent_path, _, leaf = dotted.rpartition(".")
    parent = OmegaConf.select(cfg, parent_path) if parent_path else cfg
    if isinstance(parent, ListConfig) and leaf.isdigit() and int(leaf) < len(parent):
        del parent[int(leaf)]
    elif isinstance(parent, DictConfig) and leaf in parent:
        del parent[leaf]
    else:
        raise ConfigError(f"cannot delete {dotted!r}: no such key in the config")


def load_config(
    schema: type[M],
    path: str | Path | None = None,
    overrides: Sequence[str] = (),
    base: dict[str, Any] | None = None,
) -> M:
    """Load ``path`` (YAML), apply ``overrides``, resolve interpolations and validate into ``schema``."""
    cfg = OmegaConf.create(base or {})
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist")
        try:
            cfg = OmegaConf.merge(cfg, OmegaConf.load(path))
        except (OmegaConfBaseException, yaml.YAMLError) as err:
            raise ConfigError(f"config file {str(path)!r} is not valid YAML: {err}") from err
    cfg = apply_overrides(cfg, overrides)
    try:
        data = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as err:
        raise ConfigError(f"config interpolation failed: {err}") from err
    return validate(schema, data)


def validate(schema: type[M], data: Any) -> M:
    """Validate plain data into ``schema``, converting pydantic errors into a :class:`ConfigError`."""
    try:
        return schema.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(schema, err)) from None


def format_validation_error(schema: type[BaseModel], err: ValidationError) -> str:
    """One line per problem: ``key.path: <what is wrong> (got <value>)``, with typo suggestions."""
    lines = [f"invalid {schema.__name__} config ({err.error_count()} problem(s)):"]
    for e in err.errors(include_url=False):
        loc = [str(p) for p in e["loc"]]
        path = ".".join(loc) or "<root>"
        value = e.get("input")
        if e["type"] == "extra_forbidden":
            valid = _fields_at(schema, loc[:-1])
            hint = difflib.get_close_matches(loc[-1], valid, n=1, cutoff=0.5)
            msg = f"  {path}: unknown key"
            if hint:
                msg += f"; did you mean {'.'.join(loc[:-1] + [hint[0]])!r}?"
            msg += f" (valid keys here: {', '.join(sorted(valid)) or 'none'})"
        elif e["type"] == "missing":
            msg = f"  {path}: required key is missing"
        else:
            expected = _annotation_at(schema, loc)
            msg = f"  {path}: {e['msg']} (got {value!r}"
            msg += f"; expected {expected})" if expected else ")"
        lines.append(msg)
    return "\n".join(lines)


def _fields_at(schema: type[BaseModel], loc: list[str]) -> list[str]:
    """Field names of the sub-model reached by following ``loc`` from ``schema``, if any."""
    model: Any = schema
    annotation: Any = None  # the declared type that led to ``model`` (to resolve union tags)
    for part in loc:
        member = _union_member(annotation, part) if annotation is not None else None
        if member is not None:  # ``part`` is a discriminated-union tag: the member it selects
            model, annotation = member, None
            continue
        if _is_model(model) and part in model.model_fields:
            annotation = model.model_fields[part].annotation
        elif not part.isdigit():
            annotation = None
        model = _submodel(model, part)
        if model is None:
            return []
    return list(model.model_fields) if _is_model(model) else []


def _annotation_at(schema: type[BaseModel], loc: list[str]) -> str | None:
    """A readable form of the declared type at ``loc`` (e.g. ``float``), if it is a model field."""
    if not loc:
        return None
    parent: Any = schema
    for part in loc[:-1]:
        parent = _submodel(parent, part)
        if parent is None:
            return None
    if not _is_model(parent) or loc[-1] not in parent.model_fields:
        return None
    annotation = parent.model_fields[loc[-1]].annotation
    if get_origin(annotation) is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(annotation))
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _submodel(model: Any, part: str) -> Any:
    """The model one step down ``part`` of an error location: a field, a list index, or the tag
    pydantic puts in the location of a discriminated-union member (``backends.2.tensorboard``)."""
    if not _is_model(model):
        return None
    field = model.model_fields.get(part)
    if field is not None:
        return _first_model_in(field.annotation)
    if part.isdigit():  # an index into a list of models: the location names the item's model next
        return model
    return None


def _union_member(annotation: Any, tag: str) -> Any:
    """The member model of a (discriminated) union whose literal ``type``-like field equals ``tag``."""
    for arg in get_args(annotation):
        if _is_model(arg):
            for f in arg.model_fields.values():
                if get_origin(f.annotation) is Literal and tag in get_args(f.annotation):
                    return arg
        else:
            found = _union_member(arg, tag)
            if found is not None:
                return found
    return None


def _first_model_in(annotation: Any) -> Any:
    if _is_model(annotation):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _first_model_in(arg)
        if found is not None:
            return found
    return None


def _is_model(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, BaseModel)


def to_yaml(model: BaseModel) -> str:
    """The fully resolved config as YAML (what ``--print-config`` shows)."""
    return yaml.safe_dump(model.model_dump(mode="json"), sort_keys=False)


def parse_app_args(argv: Sequence[str] | None, description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--config", required=True, help="YAML config file")
    parser.add_argument(
        "--print-config", action="store_true", help="print the resolved config and exit"
    )
    parser.add_argument(
        "overrides", nargs="*", help="key.sub=value overrides, ~key.sub to delete a key"
    )
    return parser.parse_args(argv)


def run_app(
    schema: type[M],
    main: Callable[[M], Any],
    argv: Sequence[str] | None = None,
    description: str = "",
) -> Any:
    """Entry point shared by apps: parse ``--config``/overrides, validate, then call ``main(cfg)``.

    A config problem prints the message to stderr and exits with status 2.
    """
    args = parse_app_args(argv, description)
    try:
        cfg = load_config(schema, args.config, args.overrides)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    if args.print_config:
        print(to_yaml(cfg), end="")
        return None
    return main(cfg)


def run_to_exit(coro: Coroutine[Any, Any, T], failure: type[Exception], interrupted: str = "interrupted") -> T:
    """Run an app's top coroutine; how it can fail becomes a message on stderr and an exit status:
    a ``ConfigError`` found while running exits 2 (as at load), the app's own ``failure`` 1, Ctrl-C 130."""
    try:
        return asyncio.run(coro)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except failure as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        print(interrupted, file=sys.stderr)
        raise SystemExit(130) from None

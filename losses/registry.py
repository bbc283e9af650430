"""Loss registry: YAML ``loss: {name: gspo, clip_low: 0.2}`` -> a validated loss instance.

Built-in losses register themselves on import of :mod:`losses`; users add their own with
``@register_loss("mine")`` on a :class:`~losses.base.PolicyLoss` subclass. In an app config,
type the field as :data:`LossSpec` and the YAML section becomes the loss object::

    class TrainerConfig(StrictModel):
        loss: LossSpec = Field(default_factory=GRPOLoss)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar

from pydantic import PlainSerializer, PlainValidator, ValidationError

from forge_kernels.config import ConfigError, format_validation_error
from forge_kernels.registry import Registry
from losses.base import PolicyLoss

__all__ = ["LossSpec", "build_loss", "dump_loss", "get_loss_class", "loss_names", "register_loss"]

L = TypeVar("L", bound=type[PolicyLoss])


def _check(cls: Any) -> str | None:
    if not (isinstance(cls, type) and issubclass(cls, PolicyLoss)):
        return f"needs a PolicyLoss subclass, got {cls!r}"
    if not hasattr(cls, "advantage_estimator"):
        return f"{cls.__name__} must set the ClassVar advantage_estimator"
    return None


def _named(name: str, cls: type[PolicyLoss]) -> None:
    cls.loss_name = name


LOSSES: Registry[type[PolicyLoss]] = Registry("loss", check=_check, on_register=_named)


def register_loss(name: str) -> Callable[[L], L]:
    """Class decorator: make ``cls`` selectable as ``loss: {name: <name>, ...}``."""
    return LOSSES.register(name)  # type: ignore[return-value]


def loss_names() -> list[str]:
    """Registered loss names, sorted."""
    return LOSSES.names()


def get_loss_class(name: str) -> type[PolicyLoss]:
    """The class registered as ``name`` (or at ``package.module:Name``); a clear error otherwise."""
    try:
        return LOSSES.get(name, "loss.name")
    except ValueError as err:
        raise ConfigError(str(err)) from None


def build_loss(spec: Mapping[str, Any] | PolicyLoss) -> PolicyLoss:
    """A loss instance from ``{name: ..., <fields>}`` (or an instance, returned as is)."""
    if isinstance(spec, PolicyLoss):
        return spec
    if not isinstance(spec, Mapping):
        raise ConfigError(f"a loss is a mapping with a 'name' key, got {spec!r}")
    fields = dict(spec)
    name = fields.pop("name", None)
    if name is None:
        raise ConfigError(f"loss config needs a 'name' key; valid choices: {', '.join(loss_names())}")
    cls = get_loss_class(name)
    try:
        return cls.model_validate(fields)
    except ValidationError as err:
        problems = [line.strip() for line in format_validation_error(cls, err).splitlines()[1:]]
        raise ConfigError(f"loss {name!r} ({cls.__name__}): {'; '.join(problems)}") from None


def dump_loss(loss: PolicyLoss) -> dict[str, Any]:
    """The YAML form of a loss: ``{name: ..., **fields}`` (round-trips through :func:`build_loss`)."""
    return {"name": loss.loss_name, **loss.model_dump(mode="json")}


LossSpec = Annotated[PolicyLoss, PlainValidator(build_loss), PlainSerializer(dump_loss)]
"""Pydantic field type for a loss selected by name from a config."""

"""The kernel task model, in KernelBench's format.

A task's ``source`` is a Python module defining a reference ``Model(nn.Module)``, ``get_inputs()``
and ``get_init_inputs()``; a candidate module defines ``ModelNew`` with the same constructor and
forward signature. Shapes live in the module's global constants (KernelBench style:
``batch_size = 16``); ``shapes`` overrides those globals per device class, so one task runs with
small shapes on the Triton interpreter and realistic ones on a GPU. ``alt_shapes`` is a second
set used to catch candidates that hard-code shapes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from forge_kernels.config import StrictModel

__all__ = ["DeviceClass", "ShapeOverrides", "Task"]

DeviceClass = Literal["cpu", "gpu"]
ShapeOverrides = dict[str, int | float]


class Task(StrictModel):
    """One kernel-writing task."""

    name: str = Field(min_length=1, description="unique name, e.g. 'level1/relu'")
    level: int = Field(ge=1, le=4, description="KernelBench level: 1 single op, 2 fusion, 3 block")
    source: str = Field(description="reference module: Model, get_inputs, get_init_inputs")
    solution: str | None = Field(default=None, description="a reference ModelNew (Triton), if known")
    shapes: dict[DeviceClass, ShapeOverrides] = Field(default_factory=dict)
    alt_shapes: dict[DeviceClass, ShapeOverrides] = Field(default_factory=dict)
    origin: str = Field(default="builtin", description="where the task came from (path, dataset)")
    tolerance: dict[str, float] = Field(
        default_factory=dict,
        description="atol = rtol per output dtype ('float32') where this task needs looser bounds than the "
                    "evaluator's (long reductions); it never tightens them")
    tags: list[str] = Field(default_factory=list)

    @field_validator("source")
    @classmethod
    def _source_defines_reference(cls, source: str) -> str:
        missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in source]
        if missing:
            raise ValueError(f"reference source does not define {', '.join(missing)}")
        return source

    def shape_overrides(self, device: DeviceClass, alternate: bool = False) -> ShapeOverrides:
        """Module-global overrides for ``device`` (empty: keep the module's own values)."""
        table = self.alt_shapes if alternate else self.shapes
        return dict(table.get(device, {}))

"""Shapes and tags of the built-in tasks; the source text lives in ``levelN/<stem>.py``.

A reference module's own globals are its GPU shapes; ``cpu`` shapes are small enough for the
Triton interpreter (about 0.5 ms per program instance, so few, large blocks) and the ``alt_*``
sets use different, mostly non-power-of-two sizes to catch solutions that hard-code shapes.
To add a task: write the two files and append an entry below (see the README's "Adding a built-in task").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from forge_kernels.tasks.task import ShapeOverrides

__all__ = ["BUILTIN_TASKS", "BuiltinEntry"]


@dataclass(frozen=True)
class BuiltinEntry:
    """One built-in task: where its files are, its shape sets and tags."""

    level: int
    stem: str
    cpu: ShapeOverrides
    alt_cpu: ShapeOverrides
    gpu: ShapeOverrides
    alt_gpu: ShapeOverrides
    tags: tuple[str, ...] = field(default_factory=tuple)
    tolerance: tuple[tuple[str, float], ...] = ()  # (dtype, atol = rtol) pairs, see Task.tolerance

    @property
    def name(self) -> str:
        return f"level{self.level}/{self.stem}"


def _rows(batch_size: int, dim: int) -> ShapeOverrides:
    return {"batch_size": batch_size, "dim": dim}


_ELEMENTWISE = dict(cpu=_rows(16, 1000), alt_cpu=_rows(7, 1531), gpu=_rows(4096, 4096), alt_gpu=_rows(3000, 5000))
_ROWWISE = dict(cpu=_rows(16, 1000), alt_cpu=_rows(8, 5000), gpu=_rows(4096, 4096), alt_gpu=_rows(2048, 10000))
_DIM_REDUCE = dict(
    cpu={"batch_size": 4, "dim1": 37, "dim2": 50},
    alt_cpu={"batch_size": 3, "dim1": 70, "dim2": 33},
    gpu={"batch_size": 32, "dim1": 1024, "dim2": 1024},
    alt_gpu={"batch_size": 16, "dim1": 1000, "dim2": 1500},
)

BUILTIN_TASKS: tuple[BuiltinEntry, ...] = (
    # Level 1: single operators.
    BuiltinEntry(1, "add", **_ELEMENTWISE, tags=("elementwise",)),
    BuiltinEntry(1, "mul", **_ELEMENTWISE, tags=("elementwise",)),
    BuiltinEntry(1, "relu", **_ELEMENTWISE, tags=("elementwise", "activation")),
    BuiltinEntry(1, "gelu", **_ELEMENTWISE, tags=("elementwise", "activation")),
    BuiltinEntry(1, "sigmoid", **_ELEMENTWISE, tags=("elementwise", "activation")),
    BuiltinEntry(1, "tanh", **_ELEMENTWISE, tags=("elementwise", "activation")),
    BuiltinEntry(1, "silu", **_ELEMENTWISE, tags=("elementwise", "activation")),
    BuiltinEntry(1, "leaky_relu", **_ELEMENTWISE, tags=("elementwise", "activation")),
    BuiltinEntry(1, "sum_dim", **_DIM_REDUCE, tags=("reduction",)),
    BuiltinEntry(1, "max_dim", **_DIM_REDUCE, tags=("reduction",)),
    BuiltinEntry(
        1, "mean_dim", cpu=_rows(16, 1000), alt_cpu=_rows(9, 5000), gpu=_rows(4096, 8192),
        alt_gpu=_rows(3000, 5000), tags=("reduction",),
    ),
    BuiltinEntry(1, "softmax", **_ROWWISE, tags=("softmax",)),
    BuiltinEntry(1, "log_softmax", **_ROWWISE, tags=("softmax",)),
    BuiltinEntry(
        1, "layernorm",
        cpu={"num_tokens": 16, "hidden": 1000}, alt_cpu={"num_tokens": 8, "hidden": 4500},
        gpu={"num_tokens": 8192, "hidden": 4096}, alt_gpu={"num_tokens": 5000, "hidden": 3000},
        tags=("norm",),
    ),
    BuiltinEntry(
        1, "rmsnorm",
        cpu={"batch_size": 2, "seq_len": 8, "hidden": 1000},
        alt_cpu={"batch_size": 3, "seq_len": 5, "hidden": 4500},
        gpu={"batch_size": 16, "seq_len": 1024, "hidden": 4096},
        alt_gpu={"batch_size": 8, "seq_len": 1000, "hidden": 5120},
        tags=("norm",),
    ),
    BuiltinEntry(1, "l2_norm", **_ROWWISE, tags=("norm", "reduction")),
    BuiltinEntry(
        1, "cumsum", cpu=_rows(8, 1000), alt_cpu=_rows(4, 3000), gpu=_rows(1024, 8192),
        alt_gpu=_rows(2000, 5000), tags=("scan",),
    ),
    BuiltinEntry(
        1, "matmul",
        cpu={"M": 64, "K": 96, "N": 80}, alt_cpu={"M": 33, "K": 50, "N": 70},
        gpu={"M": 4096, "K": 4096, "N": 4096}, alt_gpu={"M": 3000, "K": 2000, "N": 5000},
        # a 4096-deep fp32 product of unit-variance inputs: two correct summation orders differ by
        # ~1.2e-3 near zero outputs (tf32x3 tl.dot vs cuBLAS, measured on an H100)
        tags=("matmul",), tolerance=(("float32", 2e-3),),
    ),
    BuiltinEntry(
        1, "linear",
        cpu={"batch_size": 32, "in_features": 96, "out_features": 80},
        alt_cpu={"batch_size": 20, "in_features": 70, "out_features": 50},
        gpu={"batch_size": 4096, "in_features": 4096, "out_features": 4096},
        alt_gpu={"batch_size": 3000, "in_features": 2048, "out_features": 5000},
        tags=("matmul",),
    ),
    BuiltinEntry(
        1, "transpose",
        cpu={"rows": 100, "cols": 70}, alt_cpu={"rows": 65, "cols": 130},
        gpu={"rows": 8192, "cols": 4096}, alt_gpu={"rows": 5000, "cols": 3000},
        tags=("memory",),
    ),
    # Level 2: fused patterns.
    BuiltinEntry(
        2, "linear_relu",
        cpu={"batch_size": 32, "in_features": 96, "out_features": 80},
        alt_cpu={"batch_size": 20, "in_features": 70, "out_features": 50},
        gpu={"batch_size": 4096, "in_features": 4096, "out_features": 4096},
        alt_gpu={"batch_size": 3000, "in_features": 2048, "out_features": 5000},
        tags=("matmul", "fusion"),
    ),
    BuiltinEntry(
        2, "linear_scale_sigmoid",
        cpu={"batch_size": 32, "in_features": 96, "out_features": 80},
        alt_cpu={"batch_size": 20, "in_features": 70, "out_features": 50},
        gpu={"batch_size": 4096, "in_features": 2048, "out_features": 4096},
        alt_gpu={"batch_size": 3000, "in_features": 1536, "out_features": 5000},
        tags=("matmul", "fusion"),
    ),
    BuiltinEntry(
        2, "add_layernorm",
        cpu={"num_tokens": 16, "hidden": 1000}, alt_cpu={"num_tokens": 8, "hidden": 4500},
        gpu={"num_tokens": 8192, "hidden": 4096}, alt_gpu={"num_tokens": 5000, "hidden": 3000},
        tags=("norm", "fusion"),
    ),
    BuiltinEntry(2, "scaled_softmax", **_ROWWISE, tags=("softmax", "fusion")),
    BuiltinEntry(2, "gelu_gate", **_ELEMENTWISE, tags=("elementwise", "activation", "fusion")),
    BuiltinEntry(
        2, "residual_rmsnorm",
        cpu={"batch_size": 2, "seq_len": 8, "hidden": 1000},
        alt_cpu={"batch_size": 3, "seq_len": 5, "hidden": 4500},
        gpu={"batch_size": 16, "seq_len": 1024, "hidden": 4096},
        alt_gpu={"batch_size": 8, "seq_len": 1000, "hidden": 5120},
        tags=("norm", "fusion"),
    ),
    BuiltinEntry(
        2, "bias_gelu",
        cpu={"num_tokens": 16, "hidden": 1000}, alt_cpu={"num_tokens": 9, "hidden": 2500},
        gpu={"num_tokens": 8192, "hidden": 4096}, alt_gpu={"num_tokens": 5000, "hidden": 3000},
        tags=("elementwise", "activation", "fusion"),
    ),
    BuiltinEntry(
        2, "silu_rowsum", cpu=_rows(16, 1000), alt_cpu=_rows(9, 5000), gpu=_rows(4096, 8192),
        alt_gpu=_rows(3000, 5000), tags=("reduction", "activation", "fusion"),
    ),
    BuiltinEntry(
        2, "causal_softmax",
        cpu={"batch_size": 2, "seq_len": 40}, alt_cpu={"batch_size": 3, "seq_len": 27},
        gpu={"batch_size": 64, "seq_len": 1024}, alt_gpu={"batch_size": 32, "seq_len": 1500},
        tags=("softmax", "attention", "fusion"),
    ),
    # Level 3: small blocks.
    BuiltinEntry(
        3, "mlp",
        cpu={"batch_size": 2, "seq_len": 16, "hidden": 64, "intermediate": 192},
        alt_cpu={"batch_size": 3, "seq_len": 7, "hidden": 48, "intermediate": 100},
        gpu={"batch_size": 8, "seq_len": 1024, "hidden": 2048, "intermediate": 8192},
        alt_gpu={"batch_size": 4, "seq_len": 1000, "hidden": 1536, "intermediate": 6000},
        tags=("matmul", "block"),
    ),
    BuiltinEntry(
        3, "swiglu_mlp",
        cpu={"batch_size": 2, "seq_len": 16, "hidden": 64, "ffn_hidden": 192},
        alt_cpu={"batch_size": 3, "seq_len": 7, "hidden": 48, "ffn_hidden": 100},
        gpu={"batch_size": 8, "seq_len": 1024, "hidden": 2048, "ffn_hidden": 5632},
        alt_gpu={"batch_size": 4, "seq_len": 1000, "hidden": 1536, "ffn_hidden": 4000},
        tags=("matmul", "block"),
    ),
    BuiltinEntry(
        3, "attention_head",
        cpu={"batch_size": 2, "seq_len": 40, "d_model": 64, "head_dim": 32},
        alt_cpu={"batch_size": 3, "seq_len": 27, "d_model": 48, "head_dim": 24},
        gpu={"batch_size": 16, "seq_len": 1024, "d_model": 1024, "head_dim": 64},
        alt_gpu={"batch_size": 8, "seq_len": 1000, "d_model": 768, "head_dim": 96},
        tags=("matmul", "attention", "block"),
    ),
    BuiltinEntry(
        3, "causal_mha",
        cpu={"batch_size": 2, "seq_len": 40, "d_model": 64, "n_heads": 4},
        alt_cpu={"batch_size": 3, "seq_len": 27, "d_model": 48, "n_heads": 3},
        gpu={"batch_size": 16, "seq_len": 1024, "d_model": 1024, "n_heads": 16},
        alt_gpu={"batch_size": 8, "seq_len": 1000, "d_model": 768, "n_heads": 12},
        tags=("matmul", "attention", "block"),
    ),
    BuiltinEntry(
        3, "transformer_block",
        cpu={"batch_size": 2, "seq_len": 24, "d_model": 64, "n_heads": 4, "ffn_hidden": 128},
        alt_cpu={"batch_size": 2, "seq_len": 19, "d_model": 48, "n_heads": 3, "ffn_hidden": 100},
        gpu={"batch_size": 8, "seq_len": 1024, "d_model": 1024, "n_heads": 16, "ffn_hidden": 2816},
        alt_gpu={"batch_size": 4, "seq_len": 1000, "d_model": 768, "n_heads": 12, "ffn_hidden": 2048},
        tags=("matmul", "attention", "norm", "block"),
    ),
)

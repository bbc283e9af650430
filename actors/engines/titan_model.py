"""A TorchTitan model spec that matches a Hugging Face checkpoint's ``config.json``.

TorchTitan's registry (``torchtitan.models.<family>.model_registry(flavor)``) knows fixed
flavors (Qwen3 0.6B … 235B, Llama3 8B …). A checkpoint we train — the tiny CPU model, an SFT
output, any Qwen3/Llama3 size — need not be one of them, so :func:`titan_model_spec` takes the
registry's spec for the family (its ``parallelize_fn`` and ``state_dict_adapter``) and replaces
the model config with one built, with the family's own layer builder, from the HF config's
sizes. Anything the TorchTitan architecture cannot express (attention biases, another RoPE
scaling, a non-SiLU MLP) is refused with an error naming the field.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from transformers import PretrainedConfig

__all__ = ["Family", "family_of", "titan_model_spec"]

Family = Literal["qwen3", "llama3"]
_HF_MODEL_TYPES: dict[str, Family] = {"qwen3": "qwen3", "llama": "llama3"}


def family_of(hf_config: PretrainedConfig) -> Family:
    """The TorchTitan family of an HF config (``model_type`` qwen3 → qwen3, llama → llama3)."""
    family = _HF_MODEL_TYPES.get(hf_config.model_type)
    if family is None:
        raise ValueError(f"no TorchTitan family for HF model_type {hf_config.model_type!r}; "
                         f"expected one of {sorted(_HF_MODEL_TYPES)}")
    return family


def _rope_parameters(hf_config: PretrainedConfig) -> dict[str, Any]:
    # transformers 5 keeps RoPE settings in `rope_parameters`; 4.x had rope_theta/rope_scaling
    params = getattr(hf_config, "rope_parameters", None)
    if params:
        return dict(params)
    scaling = dict(getattr(hf_config, "rope_scaling", None) or {})
    return {"rope_theta": getattr(hf_config, "rope_theta", 10000.0), "rope_type": scaling.pop("rope_type", "default"), **scaling}


def _refuse(hf_config: PretrainedConfig, field: str, expected: Any) -> None:
    value = getattr(hf_config, field, expected)
    if value != expected:
        raise ValueError(f"HF config has {field}={value!r}; the TorchTitan {hf_config.model_type} model needs {expected!r}")


def _rope_config(rope_cls: type, hf_config: PretrainedConfig, head_dim: int, allow_llama_scaling: bool):
    params = _rope_parameters(hf_config)
    kind = params.get("rope_type", "default")
    common = dict(dim=head_dim, max_seq_len=hf_config.max_position_embeddings, theta=float(params["rope_theta"]))
    if kind == "default":
        return rope_cls.Config(**common)
    if kind == "llama3" and allow_llama_scaling:
        return rope_cls.Config(
            **common, scaling="llama", scaling_factor=float(params["factor"]),
            low_freq_factor=float(params["low_freq_factor"]), high_freq_factor=float(params["high_freq_factor"]),
            original_max_position_embeddings=int(params["original_max_position_embeddings"]),
        )
    raise ValueError(f"HF config has rope_type {kind!r}, which this TorchTitan model cannot express")


def _qwen3_config(hf: PretrainedConfig, fuse_qkv: bool):
    from torchtitan.models.common import CosSinRoPE, Embedding, Linear
    from torchtitan.models.qwen3 import Qwen3Model, _build_qwen3_layers, _qwen3_norm

    for field, expected in (("attention_bias", False), ("hidden_act", "silu"), ("use_sliding_window", False)):
        _refuse(hf, field, expected)
    dim, vocab = hf.hidden_size, hf.vocab_size
    layers = _build_qwen3_layers(
        n_layers=hf.num_hidden_layers, dim=dim, n_heads=hf.num_attention_heads, n_kv_heads=hf.num_key_value_heads,
        head_dim=hf.head_dim, hidden_dim=hf.intermediate_size, fuse_qkv=fuse_qkv, attn_backend="flex",
        rope=_rope_config(CosSinRoPE, hf, hf.head_dim, allow_llama_scaling=False),
    )
    return Qwen3Model.Config(
        vocab_size=vocab, dim=dim, norm=_qwen3_norm(dim), enable_weight_tying=bool(hf.tie_word_embeddings),
        tok_embeddings=Embedding.Config(num_embeddings=vocab, embedding_dim=dim),
        lm_head=Linear.Config(in_features=dim, out_features=vocab), layers=layers,
    )


def _llama3_config(hf: PretrainedConfig, fuse_qkv: bool):
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear
    from torchtitan.models.common.nn_modules import RMSNorm
    from torchtitan.models.llama3 import Llama3Model, _build_llama3_layers

    for field, expected in (("attention_bias", False), ("mlp_bias", False), ("hidden_act", "silu")):
        _refuse(hf, field, expected)
    dim, vocab, heads = hf.hidden_size, hf.vocab_size, hf.num_attention_heads
    head_dim = getattr(hf, "head_dim", None) or dim // heads
    if head_dim * heads != dim:
        raise ValueError(f"HF config has head_dim={head_dim} with {heads} heads and hidden_size={dim}; "
                         f"TorchTitan's llama3 needs head_dim * num_attention_heads == hidden_size")
    layers = _build_llama3_layers(
        n_layers=hf.num_hidden_layers, dim=dim, n_heads=heads, n_kv_heads=hf.num_key_value_heads,
        hidden_dim=hf.intermediate_size, fuse_qkv=fuse_qkv, attn_backend="flex",
        rope=_rope_config(ComplexRoPE, hf, head_dim, allow_llama_scaling=True),
    )
    return Llama3Model.Config(
        vocab_size=vocab, dim=dim, norm=RMSNorm.Config(normalized_shape=dim),
        enable_weight_tying=bool(hf.tie_word_embeddings),
        tok_embeddings=Embedding.Config(num_embeddings=vocab, embedding_dim=dim),
        lm_head=Linear.Config(in_features=dim, out_features=vocab), layers=layers,
    )


def _set_norm_eps(model_config, eps: float) -> None:
    from torchtitan.models.common.nn_modules import RMSNorm

    for _, norm, _, _ in model_config.traverse(RMSNorm.Config, recurse=True):
        norm.eps = eps


def titan_model_spec(hf_config: PretrainedConfig, family: Family | None = None, fuse_qkv: bool = True):
    """TorchTitan ``ModelSpec`` of ``family`` (default: from ``model_type``) sized like ``hf_config``.

    Attention is left as the registry's default (flex); :mod:`actors.engines.titan_cpu` swaps it
    for SDPA where needed.
    """
    family = family or family_of(hf_config)
    if family != family_of(hf_config):
        raise ValueError(f"family {family!r} does not match the checkpoint's model_type {hf_config.model_type!r}")
    if family == "qwen3":
        from torchtitan.models.qwen3 import model_registry

        config = _qwen3_config(hf_config, fuse_qkv)
    else:
        from torchtitan.models.llama3 import model_registry

        config = _llama3_config(hf_config, fuse_qkv)
    _set_norm_eps(config, float(hf_config.rms_norm_eps))
    return dataclasses.replace(model_registry("debugmodel"), flavor="from_hf_config", model=config)

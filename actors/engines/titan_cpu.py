"""The three adjustments TorchTitan 0.3.0 needs to train on CPU (measured here; see DESIGN.md).

TorchTitan targets accelerators. Its model builders, ``parallelize_*`` (FSDP2) and DCP
checkpointing run on CPU over gloo once these are applied, and nothing else changes:

1. :func:`use_sdpa_attention` — FlexAttention (the registry's default) has no CPU backward, and
   0.3.0's ``get_attention_config("sdpa")`` refuses SDPA for language models because SDPA cannot
   express per-document masks. Our rows are one sequence each (never packed), so causal SDPA is
   exactly the attention they need; the inner-attention config is swapped after the layers are
   built.
2. :func:`use_cpu_device_type` — ``ParallelDims.build_mesh`` creates its world mesh with the
   module-level ``device_type``, which TorchTitan resolves at import to the first available
   accelerator *or "cuda"* — on a CPU-only machine a CUDA mesh. It is set to "cpu".
3. :func:`use_sum_reduction` — FSDP2 reduce-scatters with ``PREMUL_SUM`` when it can, which gloo
   lacks; forcing plain ``SUM`` collectives is exact because TorchTitan already disables FSDP's
   gradient division (the loss is weighted by each rank's share of the global normaliser).
"""

from __future__ import annotations

import torch

__all__ = ["use_cpu_device_type", "use_sdpa_attention", "use_sum_reduction"]


def use_sdpa_attention(layer_configs: list) -> None:
    """Make every layer config's inner attention causal SDPA (in place)."""
    from torchtitan.models.common.attention import ScaledDotProductAttention

    for layer in layer_configs:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()


def use_cpu_device_type() -> None:
    """Point TorchTitan's mesh construction at CPU devices (gloo)."""
    import torchtitan.distributed.parallel_dims as parallel_dims

    parallel_dims.device_type = "cpu"


def use_sum_reduction(model: torch.nn.Module) -> None:
    """Force plain SUM gradient collectives on every FSDP2 module of ``model`` (gloo has no PREMUL_SUM)."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():  # the setter does not recurse
        if isinstance(module, FSDPModule):
            module.set_force_sum_reduction_for_comms(True)

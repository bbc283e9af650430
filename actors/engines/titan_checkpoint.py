"""TorchTitan checkpointing for the TorchTitan training engine: HF weights in, DCP save/resume.

* :func:`load_hf_weights` reads a Hugging Face safetensors directory into a (possibly
  FSDP-sharded) TorchTitan model the way TorchTitan's ``CheckpointManager.dcp_load(from_hf=True)``
  does: the adapter names the model's tensors in HF terms, DCP's ``HuggingFaceStorageReader``
  fills each rank's shards, and the adapter maps them back.
* :func:`build_checkpoint_manager` wraps TorchTitan's ``CheckpointManager`` (DCP, step-N folders,
  interval, keep-latest-k) around the model, the optimizer, and the step + LR-schedule state, so a
  restarted trainer resumes from the newest ``step-N`` folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict
from torch.distributed.checkpoint.stateful import Stateful

__all__ = ["OptimizerState", "TrainState", "build_checkpoint_manager", "load_hf_weights"]


@torch.no_grad()
def load_hf_weights(model: torch.nn.Module, adapter, hf_dir: str | Path) -> None:
    """Load the safetensors under ``hf_dir`` into ``model`` through ``adapter`` (strict: every
    model tensor must come from the checkpoint)."""
    hf_state = adapter.to_hf(model.state_dict())
    dcp.load(hf_state, storage_reader=adapter.get_hf_storage_reader(str(hf_dir)))
    missing, unexpected = model.load_state_dict(adapter.from_hf(hf_state), strict=False)
    if missing or unexpected:
        raise RuntimeError(f"HF checkpoint {hf_dir} does not match the TorchTitan model: "
                           f"missing {missing}, unexpected {unexpected}")


class OptimizerState(Stateful):
    """The optimizer's state keyed by parameter names (DCP can reshard it across world sizes)."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
        self.model, self.optimizer = model, optimizer

    def state_dict(self) -> dict[str, Any]:
        return get_optimizer_state_dict(self.model, self.optimizer)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        set_optimizer_state_dict(self.model, self.optimizer, state_dict)


class TrainState(Stateful):
    """The engine's step counter and LR schedule (the schedule's lambda is the engine's method)."""

    def __init__(self, engine):
        self.engine = engine

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.engine.step, "lr_scheduler": self.engine.scheduler.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.engine.step = int(state_dict["step"])
        self.engine.scheduler.load_state_dict(state_dict["lr_scheduler"])


def build_checkpoint_manager(engine, folder: str, interval: int, keep_latest_k: int):
    """TorchTitan's DCP ``CheckpointManager`` for ``engine`` saving ``folder/step-N`` every ``interval`` steps."""
    from torchtitan.components.checkpoint import CheckpointManager

    config = CheckpointManager.Config(enable=True, folder=str(Path(folder).resolve()), interval=interval,
                                      keep_latest_k=keep_latest_k, last_save_model_only=False)
    return CheckpointManager(
        config,
        dataloader=None,  # batches come from the replay buffer, not a TorchTitan dataloader
        model_parts=[engine.model],
        optimizers=OptimizerState(engine.model, engine.optimizer),
        lr_schedulers=TrainState(engine),
        states={},
        sd_adapter=engine.adapter,
    )

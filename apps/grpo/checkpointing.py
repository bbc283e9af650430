"""Full-state checkpoints of a GRPO run: what must match to resume, and every actor's part."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from forge_kernels.checkpoint import CheckpointWriter

from apps.grpo.actors import Actors
from apps.grpo.config import GRPOConfig

__all__ = ["restore", "run_fingerprint", "save_checkpoint"]


def run_fingerprint(cfg: GRPOConfig, model_path: str) -> dict[str, Any]:
    """What a checkpoint must share with this run to be resumed by it: the model's shape, the
    loss and the trainer's world size."""
    model = json.loads((Path(model_path) / "config.json").read_text())
    shape = {k: model.get(k) for k in ("model_type", "vocab_size", "hidden_size", "num_hidden_layers",
                                       "num_attention_heads", "num_key_value_heads", "intermediate_size")}
    return {"model": shape, "loss": type(cfg.trainer.loss).loss_name, "trainer_procs": cfg.runtime_for("trainer").procs,
            "trainer_engine": cfg.trainer.engine}


async def save_checkpoint(actors: Actors, writer: CheckpointWriter, step: int, version: int,
                          fingerprint: dict[str, Any]) -> None:
    """Every stateful actor writes its part into a fresh directory, then it is committed at once."""
    path = str(writer.begin(step))
    await actors.trainer.save_state.all(path)  # every rank writes its shard
    await actors.dataset.save_state.one(path)
    await actors.generator.save_state.all(path)
    await actors.buffer.save_state.one(path)
    writer.commit(version, fingerprint)


async def restore(actors: Actors, path: str) -> int:
    """Load a checkpoint into the freshly spawned actors; returns its policy version."""
    version = await actors.trainer.load_state.one(path)
    await actors.dataset.load_state.one(path)
    await actors.generator.load_state.all(path)
    await actors.buffer.load_state.one(path)
    return version

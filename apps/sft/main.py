"""SFT app: supervised fine-tuning on (prompt, solution) pairs; writes the checkpoint GRPO starts from.

Trains on the built-in tasks' reference solutions and/or KernelBook rows, with prompts rendered
exactly as the GRPO app renders them and the loss on assistant tokens only. Without
``model.path`` nothing is downloaded: a byte-level BPE tokenizer is trained on the task corpus and
a tiny Qwen3 model is built from ``model.tiny``. ``procs > 1`` trains with FSDP2 over that many
local processes (gloo on CPU, nccl on GPUs).

    python -m apps.sft.main --config configs/sft.yaml train.steps=100 output_dir=runs/sft/ckpt
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import torch
from pydantic import Field
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from actors.engines.hf_training import HFTrainingEngine, OptimConfig
from apps.sft.data import DataConfig, batches, build_examples, collate_sft, load_items
from apps.sft.loss import SFTLoss
from apps.sft.repair import RepairConversation, make_repairs
from forge_kernels.checkpoint import CheckpointConfig, CheckpointWriter, find_resume_point
from forge_kernels.config import StrictModel, run_app, to_yaml
from forge_kernels.distributed import DistributedConfig, destroy_process_group, free_port, init_process_group
from forge_kernels.env.prompts import SYSTEM_PROMPT, PromptConfig, sft_messages
from forge_kernels.metrics import MetricLogger, MetricsConfig, record_metric
from forge_kernels.models.tiny import TinyModelConfig, build_tiny_model, save_checkpoint, train_tokenizer
from forge_kernels.tasks import Task, load_builtin_tasks

log = logging.getLogger("apps.sft")


class TokenizerSettings(StrictModel):
    """Load a tokenizer (``path``) or train a byte-level BPE one on the task corpus."""

    path: str | None = Field(default=None, description="HF tokenizer dir; null = train one locally")
    vocab_size: int = Field(default=2048, ge=261)
    min_frequency: int = Field(default=2, ge=1)


class ModelSettings(StrictModel):
    """Start from an HF checkpoint (``path``) or build a tiny Qwen3 model from ``tiny``."""

    path: str | None = Field(default=None, description="HF checkpoint dir; null = build model.tiny")
    tiny: TinyModelConfig = TinyModelConfig()


class TrainSettings(StrictModel):
    steps: int = Field(default=200, ge=1)
    batch_size: int = Field(default=8, ge=1, description="examples per optimiser step (global)")
    optim: OptimConfig = OptimConfig(lr=1e-3)
    save_steps: list[int] = Field(default_factory=list, description="also save output_dir/step_<n> at these steps")


class SFTConfig(StrictModel):
    seed: int = 0
    device: Literal["cpu", "cuda"] = "cpu"
    procs: int = Field(default=1, ge=1, description="training processes (FSDP2 when > 1)")
    output_dir: Path = Path("runs/sft/checkpoint")
    data: DataConfig = DataConfig()
    prompt: PromptConfig = Field(default_factory=PromptConfig, description="must match the GRPO app's env.config.prompt")
    tokenizer: TokenizerSettings = TokenizerSettings()
    model: ModelSettings = ModelSettings()
    train: TrainSettings = TrainSettings()
    metrics: MetricsConfig = MetricsConfig()
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig,
                                         description="full-state checkpoints (default dir: <output_dir>/../checkpoints)")
    resume: str = Field(default="auto", min_length=1, description="auto, never, or the path of one checkpoint")

    @property
    def checkpoint_dir(self) -> str:
        return self.checkpoint.dir or str(self.output_dir.parent / f"{self.output_dir.name}-checkpoints")


def tokenizer_corpus(items: list, prompt: PromptConfig, repairs: Sequence[RepairConversation] = ()) -> list[str]:
    """Texts the tokenizer is trained on: every built-in task, the system prompt, the SFT chats and
    the repair conversations' attempts and feedback."""
    texts = [prompt.system_prompt or SYSTEM_PROMPT]
    for task in load_builtin_tasks(levels=(1, 2, 3)):
        texts += [task.source, task.solution or ""]
    texts += [m["content"] for item in items for m in sft_messages(item, prompt)]
    texts += [text for repair in repairs for text in repair.texts()]
    return texts


def build_tokenizer(cfg: SFTConfig, items: list, repairs: Sequence[RepairConversation] = ()) -> PreTrainedTokenizerBase:
    t = cfg.tokenizer
    if t.path or cfg.model.path:
        return AutoTokenizer.from_pretrained(t.path or cfg.model.path)
    return train_tokenizer(tokenizer_corpus(items, cfg.prompt, repairs), t.vocab_size, t.min_frequency)


def build_repairs(cfg: SFTConfig, items: list) -> list[RepairConversation]:
    """Score the failed attempts of ``cfg.data.repair`` (none without it); once per run, not per rank."""
    if cfg.data.repair is None:
        return []
    tasks = [item for item in items if isinstance(item, Task)]
    if not tasks:
        raise ValueError("data.repair needs built-in tasks (data.tasks): repair conversations are made from "
                         "task solutions, not KernelBook rows")
    start = time.perf_counter()
    repairs = asyncio.run(make_repairs(tasks, cfg.data.repair, cfg.prompt))
    print(f"sft repair conversations: {len(repairs)} scored in {time.perf_counter() - start:.0f} s "
          f"({', '.join(sorted({'+'.join(r.kinds) for r in repairs}))})", flush=True)
    return repairs


def build_model(cfg: SFTConfig, tokenizer: PreTrainedTokenizerBase):
    if cfg.model.path:
        return AutoModelForCausalLM.from_pretrained(cfg.model.path, dtype=torch.float32)
    return build_tiny_model(cfg.model.tiny, tokenizer)


def save(engine: HFTrainingEngine, tokenizer: PreTrainedTokenizerBase, path: Path, cfg: SFTConfig) -> None:
    """Write an HF checkpoint dir (model, tokenizer, the SFT config). Collective when sharded."""
    if engine.sharded:
        state = engine.state_dict_for_push()  # every rank joins the all-gathers
        if engine.rank != 0:
            return
        model = AutoModelForCausalLM.from_config(engine.model.config)
        model.load_state_dict(state)
    else:
        model = engine.model
    save_checkpoint(model, tokenizer, path)
    (path / "sft_config.yaml").write_text(to_yaml(cfg))


def train_sft(cfg: SFTConfig, rank: int = 0, repairs: Sequence[RepairConversation] | None = None) -> Path:
    """Train on this process (rank ``rank`` of ``cfg.procs``); returns the checkpoint dir.
    ``repairs``: the scored repair conversations (made here when None)."""
    torch.manual_seed(cfg.seed)
    items = load_items(cfg.data)
    if repairs is None:
        repairs = build_repairs(cfg, items)
    tokenizer = build_tokenizer(cfg, items, repairs)
    examples, report = build_examples(items, tokenizer, cfg.data, cfg.prompt, repairs)
    lead = rank == 0
    if lead:
        print(f"sft data: {report.summary()}", flush=True)
    device = cfg.device if cfg.device == "cpu" else f"cuda:{rank % max(torch.cuda.device_count(), 1)}"
    engine = HFTrainingEngine(build_model(cfg, tokenizer), cfg.train.optim, SFTLoss(), device=device)
    steps = cfg.train.steps
    fingerprint = {"model": {k: getattr(engine.model.config, k, None) for k in ("vocab_size", "hidden_size",
                                                                                "num_hidden_layers")},
                   "procs": cfg.procs}
    resume = find_resume_point(cfg.resume, cfg.checkpoint_dir, fingerprint)
    first = 0
    if resume is not None:
        state = torch.load(resume.path / "sft.pt", map_location=device, weights_only=False)  # our own checkpoint
        engine.load_checkpoint_state(state["engine"])
        torch.set_rng_state(state["torch_rng"].cpu())
        first = resume.step + 1
        if lead:
            print(f"sft: resuming from {resume.path} at step {first}", flush=True)
    writer = CheckpointWriter(cfg.checkpoint_dir, cfg.checkpoint.keep) if cfg.checkpoint.interval and lead else None
    logger = MetricLogger.from_config(cfg.metrics, total_steps=steps,
                                      resume_step=first if resume is not None else None) if lead else None
    if lead:
        record_metric("data/examples_kept", report.kept)
        record_metric("data/examples_dropped", report.n_dropped)
    source = batches(examples, cfg.train.batch_size, cfg.seed)
    for _ in range(first):  # the batch stream is seeded: a resumed run skips what was trained
        next(source)
    try:
        for step in range(first, steps):  # logged 0-based, like every app's metrics
            chunk = next(source)
            batch = collate_sft(chunk, tokenizer.pad_token_id)
            start = time.perf_counter()
            metrics = engine.train_step(batch)
            elapsed = time.perf_counter() - start
            if lead:
                for key, value in metrics.items():
                    record_metric(key, value)
                record_metric("train/step_s", elapsed)
                record_metric("train/tokens_per_s", sum(len(e) for e in chunk) / elapsed)
                logger.flush(step)
            done = step + 1
            if writer is not None and (done % cfg.checkpoint.interval == 0 or done == steps):
                path = writer.begin(step)
                torch.save({"engine": engine.checkpoint_state(), "torch_rng": torch.get_rng_state()}, path / "sft.pt")
                writer.commit(engine.step, fingerprint)
            if done in cfg.train.save_steps and done != steps:
                save(engine, tokenizer, cfg.output_dir / f"step_{done}", cfg)
        save(engine, tokenizer, cfg.output_dir, cfg)
    finally:
        if logger is not None:
            logger.close()
    if lead:
        print(f"sft checkpoint: {cfg.output_dir}", flush=True)
    return cfg.output_dir


def _rank_main(rank: int, cfg: SFTConfig, port: int, repairs: list[RepairConversation]) -> None:
    init_process_group(DistributedConfig(rank=rank, world_size=cfg.procs, master_port=port))
    try:
        if cfg.device == "cpu":
            torch.set_num_threads(max(1, torch.get_num_threads() // cfg.procs))
        train_sft(cfg, rank, repairs)
    finally:
        destroy_process_group()


def main(cfg: SFTConfig) -> Path:
    """Run SFT (spawning ``cfg.procs`` processes when > 1); returns the checkpoint dir."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    if cfg.procs == 1:
        return train_sft(cfg)
    repairs = build_repairs(cfg, load_items(cfg.data))  # scored once, shared by the ranks
    torch.multiprocessing.spawn(_rank_main, args=(cfg, free_port(), repairs), nprocs=cfg.procs, join=True)
    return cfg.output_dir


if __name__ == "__main__":
    run_app(SFTConfig, main, description=__doc__)

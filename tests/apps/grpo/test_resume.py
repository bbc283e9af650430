"""Checkpoints and resume of the GRPO app: a run killed with SIGKILL at any point and resumed
repeats the uninterrupted run step for step (sync, CPU, same machine: bitwise); async resumes
lose and repeat no step; a crash while a checkpoint is written leaves the previous one usable;
bad checkpoints are clear errors, never a silent fresh start."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from apps.grpo.main import GRPOFailed, run
from forge_kernels.checkpoint import CheckpointError, CheckpointWriter, find_resume_point

ROOT = Path(__file__).resolve().parents[3]
# timings differ run to run; everything else a step logs must repeat exactly
TIMING = ("perf/", "env/step_s")


def _overrides(tmp: Path, name: str, *extra: str) -> list[str]:
    return [f"run_dir={tmp}/{name}", f"store.namespace=r{uuid.uuid4().hex[:8]}", f"store.root={tmp}/shm",
            f"metrics.backends.1.path={tmp}/{name}/metrics.jsonl", "checkpoint.interval=1", *extra]


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _comparable(row: dict) -> dict:
    return {k: v for k, v in row.items() if k != "time" and not k.startswith(TIMING)}


def _kill_after_rows(tmp: Path, name: str, rows: int, *extra: str) -> None:
    """Run the app in a subprocess and SIGKILL it once its JSONL holds ``rows`` rows."""
    cmd = [sys.executable, "-m", "apps.grpo.main", "--config", "configs/grpo_tiny.yaml",
           *_overrides(tmp, name, *extra)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    log = tmp / name / "metrics.jsonl"
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if log.is_file() and len(log.read_text().splitlines()) >= rows:
                break
            time.sleep(0.05)
        assert proc.poll() is None, f"the run ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def test_sync_run_killed_and_resumed_repeats_the_uninterrupted_run(tmp_path, tiny_config):
    steps = ["mode=sync", "steps=5"]
    whole = asyncio.run(run(tiny_config(*_overrides(tmp_path, "whole", *steps)[2:], f"run_dir={tmp_path}/whole",
                                        f"metrics.backends.1.path={tmp_path}/whole/metrics.jsonl")))
    assert len(whole) == 5
    _kill_after_rows(tmp_path, "crashed", 3, *steps)
    resumed_cfg = tiny_config(*_overrides(tmp_path, "crashed", *steps)[2:], f"run_dir={tmp_path}/crashed",
                              f"metrics.backends.1.path={tmp_path}/crashed/metrics.jsonl")
    resumed = asyncio.run(run(resumed_cfg))
    assert 1 <= len(resumed) <= 3  # it continued from a checkpoint instead of starting over
    expected = [_comparable(r) for r in _rows(tmp_path / "whole" / "metrics.jsonl")]
    got = [_comparable(r) for r in _rows(tmp_path / "crashed" / "metrics.jsonl")]
    assert [r["step"] for r in got] == [0, 1, 2, 3, 4]  # no step lost, none logged twice
    assert got == expected


def test_async_run_killed_and_resumed_loses_and_repeats_no_step(tmp_path, tiny_config):
    steps = ["mode=async", "steps=6"]
    _kill_after_rows(tmp_path, "crashed", 3, *steps)
    cfg = tiny_config(*_overrides(tmp_path, "crashed", *steps)[2:], f"run_dir={tmp_path}/crashed",
                      f"metrics.backends.1.path={tmp_path}/crashed/metrics.jsonl")
    asyncio.run(run(cfg))
    rows = _rows(tmp_path / "crashed" / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(6))
    # the trainer's version advances by one per step across the restart (the generator resumed
    # at the checkpoint's version), and the staleness bound held throughout
    assert [r["train/version/mean"] for r in rows] == [float(v) for v in range(1, 7)]
    assert max(r["train/staleness_max/max"] for r in rows) <= cfg.buffer.max_policy_age


def test_a_crash_while_writing_a_checkpoint_leaves_the_previous_one(tmp_path):
    fingerprint = {"loss": "grpo"}
    writer = CheckpointWriter(tmp_path, keep=3)
    for step in (0, 1):
        (writer.begin(step) / "part.bin").write_bytes(b"x")
        writer.commit(version=step + 1, fingerprint=fingerprint)
    interrupted = writer.begin(2)  # parts written, never committed: the process died here
    (interrupted / "part.bin").write_bytes(b"half")
    (tmp_path / "step-000003").mkdir()  # a directory without meta.json is never complete
    point = find_resume_point("auto", tmp_path, fingerprint)
    assert point is not None and point.step == 1 and point.version == 2
    again = writer.begin(2)  # the next attempt starts from an empty directory
    assert list(again.iterdir()) == [] and len(list(tmp_path.glob(".tmp-*"))) == 1


def test_bad_checkpoints_are_clear_errors(tmp_path, tiny_config):
    with pytest.raises(CheckpointError, match=r"checkpoint '.*/nope' does not exist"):
        asyncio.run(run(tiny_config(f"resume={tmp_path}/nope")))
    cfg = tiny_config(*_overrides(tmp_path, "a", "mode=sync", "steps=1")[2:], f"run_dir={tmp_path}/a",
                      f"metrics.backends.1.path={tmp_path}/a/metrics.jsonl")
    asyncio.run(run(cfg))
    (ckpt,) = (tmp_path / "a" / "checkpoints").glob("step-*")
    other_loss = tiny_config(f"resume={ckpt}", "trainer.loss.name=gspo", "trainer.loss.aggregation=token-mean")
    with pytest.raises(CheckpointError, match=r"from another configuration \(loss: checkpoint has 'grpo', this run "
                                              r"has 'gspo'\)"):
        asyncio.run(run(other_loss))
    other_shape = tiny_config(f"resume={ckpt}", "model.tiny.hidden_size=32")
    with pytest.raises(CheckpointError, match="hidden_size"):
        asyncio.run(run(other_shape))
    part = ckpt / "trainer.pt"
    part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])  # truncated by a full disk, say
    with pytest.raises(GRPOFailed, match=r"cannot restore the trainer from trainer.pt"):
        asyncio.run(run(tiny_config(f"resume={ckpt}", "steps=2", "mode=sync")))
    (ckpt / "meta.json").unlink()
    with pytest.raises(CheckpointError, match="is incomplete: no meta.json"):
        asyncio.run(run(tiny_config(f"resume={ckpt}")))


def _install_crashing_actor(tmp_path: Path, monkeypatch, name: str, source: str) -> None:
    """Write an actor module that monarch's processes import by name (tests/ is not importable
    there), and the marker file path that makes its crash happen once."""
    (tmp_path / "crash_mod").mkdir()
    (tmp_path / "crash_mod" / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path / "crash_mod"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "crash_mod"), str(ROOT),
                                                      os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("FK_CRASH_MARK", str(tmp_path / "crashed.mark"))


CRASHING_TRAINER = '''
import os
from pathlib import Path

from actors.trainer import Trainer
from forge_kernels.runtime import endpoint


class CrashOnceTrainer(Trainer):
    """Its process dies (os._exit) at its third step, once: the marker file remembers."""

    @endpoint
    async def train_step(self, episodes):
        mark = Path(os.environ["FK_CRASH_MARK"])
        if self.version == 2 and not mark.exists():
            mark.write_text("crashed")
            os._exit(1)
        return await super().train_step(episodes)
'''

CRASHING_REWARD = '''
import os
from pathlib import Path

from actors.reward import RewardActor
from forge_kernels.runtime import endpoint


class CrashOnceReward(RewardActor):
    """Its process dies (os._exit) on its third scoring call, once: the marker file remembers."""

    async def setup(self):
        await super().setup()
        self.calls = 0

    @endpoint
    async def score(self, task, completions):
        self.calls += 1
        mark = Path(os.environ["FK_CRASH_MARK"])
        if self.calls == 3 and not mark.exists():
            mark.write_text("crashed")
            os._exit(1)
        return await super().score(task, completions)
'''


@pytest.mark.parametrize("actor,module,source", [("trainer", "fk_crash_trainer:CrashOnceTrainer", CRASHING_TRAINER),
                                                 ("reward", "fk_crash_reward:CrashOnceReward", CRASHING_REWARD)])
def test_an_actor_process_that_dies_is_recovered_from_the_newest_checkpoint(tmp_path, monkeypatch, actor, module,
                                                                             source):
    """Monarch backend: the trainer's (or the reward actor's) process exits mid-run; the app
    resumes from the newest checkpoint and finishes, each step logged once, the recovery in the
    metrics, no actor process left behind."""
    import psutil

    from apps.grpo.config import GRPOConfig
    from apps.grpo.main import run_recovering
    from forge_kernels.config import load_config

    _install_crashing_actor(tmp_path, monkeypatch, module.split(":")[0], source)
    cfg = load_config(GRPOConfig, ROOT / "configs" / "grpo_tiny_monarch.yaml", [
        f"run_dir={tmp_path}/run", f"store.namespace=k{uuid.uuid4().hex[:8]}", f"store.root={tmp_path}/shm",
        f"metrics.backends.1.path={tmp_path}/metrics.jsonl", "steps=4", "mode=sync", "checkpoint.interval=1",
        "runtime_overrides.trainer.procs=1", f"actor_classes.{actor}={module}"])
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    history = asyncio.run(run_recovering(cfg))
    assert (tmp_path / "crashed.mark").exists()  # the actor really died once
    assert [h["train/version/mean"] for h in history] == [1.0, 2.0, 3.0, 4.0]
    rows = _rows(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert sum(r.get("run/restarts/max", 0.0) for r in rows) == 1.0
    time.sleep(1)
    leftover = {p.pid for p in psutil.Process().children(recursive=True) if p.is_running()} - before
    assert not leftover, "actor processes outlived the run"


CRASHING_GENERATOR = '''
import os
from pathlib import Path

from actors.generator import Generator
from forge_kernels.runtime import endpoint


class CrashOnceGenerator(Generator):
    """One replica's process dies (os._exit) on a generate call after the first weight update."""

    @endpoint
    async def generate(self, prompt_ids, n, sampling=None):
        mark = Path(os.environ["FK_CRASH_MARK"])
        if self.engine.policy_version >= 1 and not mark.exists():
            mark.write_text(str(self.engine.policy_version))
            os._exit(1)
        return await super().generate(prompt_ids, n, sampling)
'''


def test_a_generator_replica_that_dies_comes_back_at_the_current_version(tmp_path, monkeypatch):
    """Monarch backend, two generator replicas: one dies mid-run; the service re-sends its
    requests, restarts it, and the restarted replica loads the newest weights. The run finishes
    without a recovery from a checkpoint."""
    from apps.grpo.config import GRPOConfig
    from apps.grpo.main import run_recovering
    from forge_kernels.config import load_config

    _install_crashing_actor(tmp_path, monkeypatch, "fk_crash_generator", CRASHING_GENERATOR)
    cfg = load_config(GRPOConfig, ROOT / "configs" / "grpo_tiny_monarch.yaml", [
        f"run_dir={tmp_path}/run", f"store.namespace=g{uuid.uuid4().hex[:8]}", f"store.root={tmp_path}/shm",
        f"metrics.backends.1.path={tmp_path}/metrics.jsonl", "steps=4", "mode=sync",
        "runtime_overrides.trainer.procs=1", "runtime_overrides.generator.replicas=2",
        "actor_classes.generator=fk_crash_generator:CrashOnceGenerator"])
    history = asyncio.run(run_recovering(cfg))
    assert (tmp_path / "crashed.mark").exists()  # a replica really died
    assert [h["train/version/mean"] for h in history] == [1.0, 2.0, 3.0, 4.0]
    # staleness 0 in sync mode: the restarted replica served the current version, not version 0
    assert all(h["train/staleness_max/max"] == 0 for h in history)
    assert all("run/restarts/max" not in h for h in history)

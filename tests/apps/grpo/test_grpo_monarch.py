"""The GRPO app on the monarch backend (generator, trainer, reward in their own processes), and
Ctrl-C on a running app: exit status 130, actors and evaluator processes gone, store emptied."""

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

import psutil
from transformers import AutoModelForCausalLM

from apps.grpo.main import run
from forge_kernels.config import load_config
from apps.grpo.config import GRPOConfig

ROOT = Path(__file__).resolve().parents[3]


def test_async_run_on_monarch(tmp_path):
    cfg = load_config(GRPOConfig, ROOT / "configs" / "grpo_tiny_monarch.yaml", [
        f"run_dir={tmp_path}/run", f"store.namespace=m{uuid.uuid4().hex[:8]}", f"store.root={tmp_path}/shm",
        f"metrics.backends.1.path={tmp_path}/metrics.jsonl", "save_final=true"])
    assert cfg.runtime_for("generator").backend == "monarch" and cfg.runtime_for("buffer").backend == "local"
    assert cfg.runtime_for("trainer").procs == 2  # a sharded trainer: every call reaches both ranks
    history = asyncio.run(run(cfg))
    assert [h["train/version/mean"] for h in history] == [1.0, 2.0]
    assert all(h["train/logprob_diff_max/max"] < 1e-4 or h["train/staleness_max/max"] > 0 for h in history)
    rows = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 2 and "reward/total/mean" in json.loads(rows[0])
    assert not list((tmp_path / "shm").rglob("*.json"))  # every published version was deleted
    # the final save gathered the shards (a collective on both ranks) into a full HF checkpoint
    final, info = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "final", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    initial = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "init_model").state_dict()
    assert {k: v.shape for k, v in final.state_dict().items()} == {k: v.shape for k, v in initial.items()}


def test_ctrl_c_shuts_down_cleanly(tmp_path):
    jsonl = tmp_path / "metrics.jsonl"
    namespace = f"c{uuid.uuid4().hex[:8]}"
    cmd = [sys.executable, "-m", "apps.grpo.main", "--config", str(ROOT / "configs" / "grpo_tiny.yaml"),
           "steps=10000", f"run_dir={tmp_path}/run", f"store.namespace={namespace}", f"store.root={tmp_path}/shm",
           f"metrics.backends.1.path={jsonl}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while not (jsonl.exists() and jsonl.read_text().count("\n") >= 2):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the app made no progress"
            time.sleep(0.2)
        children = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"left running: {alive}"
    assert not list((tmp_path / "shm").rglob("*.json"))

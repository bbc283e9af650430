"""The tiny GRPO app across three loopback hosts (``forge-kernels worker`` agents): the trainer
(2 procs, FSDP2 over gloo) on host 0, the generator on host 1 and the reward actor with its
evaluator workers on host 2, weights crossing hosts through torchstore; and a host agent killed
mid-run: a bounded failure naming the host and its actors, nothing left running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
import yaml

from tests.runtime.test_hosts import descendants, start_agents, stop_agents

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _config(tmp_path: Path, hosts: list[str], steps: int) -> Path:
    cfg = yaml.safe_load((ROOT / "configs" / "grpo_tiny_monarch.yaml").read_text())
    cfg.update(steps=steps, run_dir=str(tmp_path / "run"), save_final=False)
    cfg["store"] = {"backend": "auto", "namespace": f"h{uuid.uuid4().hex[:8]}", "root": str(tmp_path / "shm")}
    cfg["runtime"] = {"backend": "monarch", "hosts": hosts, "host_timeout_s": 20}
    cfg["runtime_overrides"].update(trainer={"procs": 2, "host": 0}, generator={"host": 1},
                                    reward={"host": 2})
    cfg["metrics"]["backends"][1]["path"] = str(tmp_path / "metrics.jsonl")
    path = tmp_path / "grpo_hosts.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _run_app(config: Path, *overrides: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "apps.grpo.main", "--config", str(config), *overrides],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_grpo_runs_across_three_hosts(tmp_path):
    hosts, agents = start_agents(3)
    try:
        app = _run_app(_config(tmp_path, hosts, steps=3))
        out, err = app.communicate(timeout=540)
        assert app.returncode == 0, f"{out}\n{err}"
        assert f"placement: trainer -> {hosts[0]} procs=2 devices=cpu" in out
        assert f"placement: generator -> {hosts[1]} procs=1 devices=cpu" in out
        assert f"placement: reward -> {hosts[2]} procs=1 devices=cpu" in out
        assert "placement: buffer -> local (controller process)" in out
        rows = [json.loads(r) for r in (tmp_path / "metrics.jsonl").read_text().splitlines()]
        assert [r["train/version/mean"] for r in rows] == [1.0, 2.0, 3.0]
        # step 3 trains at version 2 on samples at most 1 version old: the generator on host 1
        # loaded a version the trainer on host 0 published (a generator left at version 0 -> 2)
        assert rows[-1]["train/staleness_max/max"] <= 1
        assert not list((tmp_path / "shm").rglob("*"))  # store auto chose torchstore, not shm
        assert all(descendants(a) == set() for a in agents)  # every actor process stopped
    finally:
        stop_agents(agents)


def test_a_dead_host_ends_the_run_in_bounded_time_naming_it(tmp_path):
    hosts, agents = start_agents(3)
    try:
        jsonl = tmp_path / "metrics.jsonl"
        app = _run_app(_config(tmp_path, hosts, steps=10_000))
        deadline = time.monotonic() + 300
        while not (jsonl.exists() and jsonl.read_text().count("\n") >= 1):
            assert app.poll() is None, app.communicate()
            assert time.monotonic() < deadline, "the app made no progress"
            time.sleep(0.2)
        actor_procs = [psutil.Process(p) for a in agents for p in descendants(a)]
        assert len(actor_procs) >= 4  # trainer x2, generator, reward (+ their helpers)
        agents[1].send_signal(signal.SIGKILL)  # host 1, carrying the generator, dies
        killed = time.monotonic()
        out, err = app.communicate(timeout=120)
        elapsed = time.monotonic() - killed
        assert app.returncode not in (0, None), out
        assert elapsed <= 60, f"the run took {elapsed:.0f} s to end after its host died"
        assert f"host {hosts[1]} died" in err and "Generator" in err, err[-3000:]
        _, alive = psutil.wait_procs(actor_procs, timeout=15)
        assert not alive, f"left running: {alive}"
        assert agents[0].poll() is None and agents[2].poll() is None  # surviving agents serve on
        assert descendants(agents[0]) == set() and descendants(agents[2]) == set()
    finally:
        stop_agents(agents)

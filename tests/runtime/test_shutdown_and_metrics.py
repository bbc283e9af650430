"""Clean shutdown (normal, on error, Ctrl-C) leaves no processes; metrics merge across processes."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from forge_kernels.metrics import MetricLogger, get_collector
from forge_kernels.runtime import collect_metric_states, live_handles, shutdown, spawn

REPO = Path(__file__).resolve().parents[2]

APP = textwrap.dedent('''
    import asyncio, json, os, sys, psutil
    from forge_kernels.runtime import Actor, endpoint, shutdown, spawn

    class Sleeper(Actor):
        @endpoint
        async def nap(self, seconds: float) -> int:
            await asyncio.sleep(seconds)
            return os.getpid()

    async def main(backend: str, mode: str) -> None:
        try:
            svc = await spawn(Sleeper, backend=backend, replicas=2)
            mesh = await spawn(Sleeper, backend=backend)
            await svc.nap.fanout(0.0)
            await mesh.nap.call(0.0)
            children = [p.pid for p in psutil.Process().children(recursive=True)]
            print(json.dumps(children), flush=True)
            if mode == "error":
                raise RuntimeError("the app failed")
            if mode == "interrupt":
                await mesh.nap.call(600)  # killed by Ctrl-C while waiting
        finally:
            await shutdown()

    asyncio.run(main(sys.argv[1], sys.argv[2]))
''')


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("mode", ["normal", "error", "interrupt"])
def test_shutdown_leaves_no_processes(tmp_path, backend, mode):
    script = tmp_path / "app.py"
    script.write_text(APP)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, str(script), backend, mode], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        children = json.loads(proc.stdout.readline() or "null")
        assert children is not None, proc.stderr.read()
        if backend == "monarch":
            assert len(children) >= 3  # 2 replicas + 1 mesh
        if mode == "interrupt":
            time.sleep(0.3)
            proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
        stderr = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    # Ctrl-C: Python re-raises KeyboardInterrupt at exit, so the app dies of SIGINT
    assert code == {"normal": 0, "error": 1, "interrupt": -signal.SIGINT}[mode], stderr
    if mode == "error":
        assert "the app failed" in stderr
    if mode == "interrupt":
        assert "KeyboardInterrupt" in stderr
    deadline = time.monotonic() + 10
    while not all(_gone(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in children if not _gone(p)] == []


def test_shutdown_stops_every_handle_in_process(run, backend, actors):
    async def body():
        mesh = await spawn(actors.Counter, backend=backend)
        svc = await spawn(actors.Counter, backend=backend, replicas=2)
        pids = [w["pid"] for w in await mesh.whoami.call() + await svc.whoami.fanout()]
        assert mesh in live_handles() and svc in live_handles()
        await shutdown()
        assert mesh.stopped and svc.stopped and live_handles() == []
        return pids

    pids = run(body())
    if backend == "monarch":
        assert all(_gone(p) for p in pids)
        assert os.getpid() not in pids


def test_metrics_from_many_processes_merge_exactly(run, backend, actors):
    values = [[1.0, 2.0, 3.5], [10.0, -4.0], [0.25], [7.0, 7.0, 8.0]]

    async def body():
        get_collector().drain()  # start from a clean controller collector
        mesh = await spawn(actors.Counter, backend=backend, procs=2)
        svc = await spawn(actors.Counter, backend=backend, service=True)
        try:
            await mesh.at(0).record.call_one(values[0])
            await mesh.at(1).record.call_one(values[1])
            await svc.record.route(values[2])
            await svc.record.route(values[3])
            states = await collect_metric_states(mesh, svc)
            if backend == "monarch":
                assert len(states) == 3  # one per process
            return MetricLogger([]).flush(step=0, remote_states=states)
        finally:
            await mesh.stop()
            await svc.stop()

    scalars = run(body())
    flat = [v for vs in values for v in vs]
    assert scalars["test/mean/mean"] == pytest.approx(statistics.fmean(flat))
    assert scalars["test/sum/sum"] == pytest.approx(sum(flat))
    assert scalars["test/std/std"] == pytest.approx(statistics.pstdev(flat))
    assert scalars["test/max/max"] == 10.0

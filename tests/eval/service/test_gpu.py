"""The service on a GPU: a server with ``--devices 0`` evaluates and times a built-in solution, and
timing waits for the device's timing lock (one timed kernel per GPU at a time).

Run on a CUDA machine with ``make test-gpu``; skipped where CUDA is absent.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time

import httpx
import pytest
import torch

from forge_kernels.eval import EvalOptions
from forge_kernels.eval.service import LocalEvalServer
from forge_kernels.eval.service.workers import timing_lock_path

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

HOLD_S = 4.0


def test_gpu_server_times_a_builtin_solution_under_the_device_lock(relu, tmp_path):
    options = EvalOptions(trials=2, timeout_s=120, warmup=3, repeats=20).model_dump(mode="json")
    with LocalEvalServer(devices=[0], timing_lock_dir=str(tmp_path), startup_timeout_s=300) as server, \
            httpx.Client(base_url=server.url, timeout=300) as http:
        workers = http.get("/v1/workers").json()
        assert [w["device"] for w in workers] == ["cuda:0"] and workers[0]["state"] == "ready"

        first = http.post("/v1/eval", json={"task": "level1/relu", "code": relu.solution, "options": options})
        assert first.status_code == 200, first.text
        result = first.json()["result"]
        assert result["correct"] and result["fault"] == "none", result["error"]
        assert result["timing_available"] and result["speedup"] is not None and result["speedup"] > 0
        assert "cpu" not in result["device"]

        # Hold the GPU's timing lock: a new evaluation must wait for it before it can time.
        lock = os.open(timing_lock_path(0, str(tmp_path)), os.O_RDONLY)
        fcntl.flock(lock, fcntl.LOCK_EX)
        threading.Timer(HOLD_S, fcntl.flock, (lock, fcntl.LOCK_UN)).start()
        start = time.monotonic()
        second = http.post("/v1/eval", json={"task": "level1/relu", "code": relu.solution,
                                             "options": {**options, "seed": 1}})
        waited = time.monotonic() - start
        os.close(lock)
        assert second.json()["result"]["timing_available"]
        assert waited >= HOLD_S, waited

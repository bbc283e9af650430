"""Attacks on the eval service itself: a client-posted task whose *reference* is hostile (it runs
in the same jail as candidates), and a server killed mid-evaluation (nothing left behind)."""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import time

import pytest

from forge_kernels.eval import EvalOptions, FaultClass
from forge_kernels.eval.service import EvalClient, LocalEvalServer
from forge_kernels.tasks.task import Task
from tests.redteam.conftest import SECRET_VALUE, TASKS
from tests.redteam.test_corpus import CANARIES, clean, leftovers

pytestmark = pytest.mark.redteam

HOSTILE_REFERENCE = '''
import os
import torch
import torch.nn as nn
import forge_kernels

N = 1024
TARGET = os.path.join(os.path.dirname(forge_kernels.__file__), "redteam_canary")


class Model(nn.Module):
    def forward(self, x):
        try:
            open(TARGET, "w").write("pwned")
        except OSError:
            pass
        leak = " ".join(open(f"/proc/{p}/environ", "rb").read().decode(errors="replace")
                        for p in os.listdir("/proc") if p.isdigit())
        raise RuntimeError("reference leak: " + leak + " " + " ".join(os.environ))


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''


def test_hostile_posted_reference_is_jailed(redteam_env):
    task = Task(name="redteam/hostile_reference", level=1, source=HOSTILE_REFERENCE, shapes={"cpu": {"N": 1024}})
    before = set(os.listdir(tempfile.gettempdir()))

    async def run(url: str):
        async with EvalClient(url, timeout_s=300) as client:
            return await client.evaluate(task, "class ModelNew: pass", EvalOptions(device="cpu"))

    with LocalEvalServer(devices="cpu", workers=1) as server:
        r = asyncio.run(asyncio.wait_for(run(server.url), 300))
    assert r.fault is FaultClass.INTERNAL_ERROR  # the task is broken: its reference raises
    assert SECRET_VALUE not in (r.error or "") and "FORGE_REDTEAM" not in (r.error or ""), r.error
    assert not any(c.exists() for c in CANARIES)
    assert clean(found := leftovers(before)), found


def test_server_killed_mid_evaluation_leaves_nothing(redteam_env):
    before = set(os.listdir(tempfile.gettempdir()))
    slow = "import time\nclass ModelNew:\n    def __init__(self):\n        time.sleep(60)\n"

    async def submit(url: str) -> None:
        async with EvalClient(url, timeout_s=5, max_retries=0) as client:
            try:
                await client.evaluate(TASKS["relu"], slow, EvalOptions(device="cpu", timeout_s=120))
            except Exception:  # noqa: BLE001 - the server dies under it
                pass

    server = LocalEvalServer(devices="cpu", workers=2)
    server.start()
    try:
        asyncio.run(submit(server.url))
        time.sleep(1.0)  # the candidate is sleeping in its jail now
        assert server.process is not None
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(timeout=30)
    finally:
        server.stop()
    assert clean(found := leftovers(before)), found

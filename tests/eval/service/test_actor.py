"""``EvalWorker`` as a runtime Service of replicas, on the local and the monarch backend."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from forge_kernels.eval import EvalOptions, FaultClass
from forge_kernels.eval.service.actor import EvalWorker
from forge_kernels.runtime import Service, spawn

KERNELS = Path(__file__).resolve().parents[2] / "eval" / "kernels"
FAST = EvalOptions(trials=1, alt_shape_trials=0, timeout_s=20.0, host_memory_mb=1024)


# monarch is the scale-out path (actor processes, possibly on other hosts); the local backend runs
# the same actor code in-process, so it is only in the slow run
@pytest.mark.parametrize("backend", [pytest.param("local", marks=pytest.mark.slow), "monarch"])
def test_eval_worker_service(backend, relu, run):
    segfault = (KERNELS / "segfault.py").read_text()

    async def body() -> None:
        svc = await spawn(EvalWorker, {"device": "cpu"}, backend=backend, replicas=2, router="least_loaded",
                          setup_timeout_s=180)
        try:
            assert isinstance(svc, Service)
            codes = [relu.solution, segfault] * 3
            results = await asyncio.gather(*(svc.evaluate.route(relu, c, FAST.model_copy(update={"seed": i}))
                                             for i, c in enumerate(codes)))
            assert [r.fault for r in results] == [FaultClass.NONE, FaultClass.SEGFAULT_ABORT] * 3
            batch = await svc.evaluate_batch.route("level1/relu", [relu.solution, relu.solution],
                                                 FAST.model_copy(update={"seed": 99}))
            assert [r.correct for r in batch] == [True, True]
            statuses = await svc.status.fanout()
            assert all(s["health"]["status"] == "ok" for s in statuses)
            done = [sum(w["evaluations"] for w in s["workers"]) for s in statuses]
            assert sum(done) == 7 and all(d > 0 for d in done), done  # both replicas worked; batch dedup
            if backend == "monarch":
                assert len({s["pid"] for s in statuses}) == 2  # two actor processes
            await svc.close.fanout()
        finally:
            await svc.stop()

    run(body())

"""Several servers behind the client's balancer: one is killed mid-run and nothing is lost; the
client's errors when every server is down and when a request itself is bad."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import httpx
import pytest

from forge_kernels.eval import EvalOptions
from forge_kernels.eval.service import EvalClient, EvalRequestError, EvalServiceUnavailable, LocalEvalServer

KERNELS = Path(__file__).resolve().parents[2] / "eval" / "kernels"
FAST = EvalOptions(trials=1, alt_shape_trials=0, timeout_s=20.0, host_memory_mb=1024)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_servers_one_killed_mid_run(server, relu, run):
    """Requests spread over both servers; SIGKILL one while it holds work: every request still
    gets its correct answer (the client retries the lost ones, same ids, on the survivor)."""
    codes = [relu.solution, (KERNELS / "value_mismatch.py").read_text()]
    jobs = [(codes[i % 2], FAST.model_copy(update={"seed": 9000 + i})) for i in range(24)]

    async def body(second: LocalEvalServer) -> list:
        async with EvalClient([server.url, second.url], max_retries=8, backoff_s=0.1) as client, \
                httpx.AsyncClient(base_url=second.url) as probe:
            calls = asyncio.gather(*(client.evaluate(relu, code, options) for code, options in jobs))
            while True:  # kill the second server once it is busy with its share
                busy = [w for w in (await probe.get("/v1/workers")).json() if w["in_flight"] or w["evaluations"]]
                if busy:
                    break
                await asyncio.sleep(0.05)
            second.kill()
            return await calls

    with LocalEvalServer(devices="cpu", workers=1) as second:
        results = run(body(second))
    assert [r.correct for r in results] == [i % 2 == 0 for i in range(len(jobs))]
    assert [r.fault.value for r in results[1::2]] == ["output_value_mismatch"] * (len(jobs) // 2)


def test_every_server_down_is_a_clear_error(run):
    urls = [f"http://127.0.0.1:{_free_port()}", f"http://127.0.0.1:{_free_port()}"]

    async def body() -> None:
        async with EvalClient(urls, max_retries=3, backoff_s=0.01, connect_timeout_s=1.0) as client:
            await client.evaluate("level1/relu", "pass")

    with pytest.raises(EvalServiceUnavailable) as info:
        run(body())
    message = str(info.value)
    assert all(u in message for u in urls) and "ConnectError" in message
    assert info.value.urls == urls and len(info.value.errors) == 4


def test_bad_request_is_not_retried(server, run):
    async def body() -> None:
        async with EvalClient(server.url, max_retries=5) as client:
            await client.evaluate("level1/not_a_task", "pass")

    with pytest.raises(EvalRequestError) as info:
        run(body())
    assert info.value.status == 422 and "level1/not_a_task" in str(info.value)

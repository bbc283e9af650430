"""Load and faults against the live server process: 200+ concurrent requests mixing correct, wrong
and crashing kernels (segfault, abort, os._exit, infinite loop, host OOM) with malformed requests,
while one worker's zygote hangs (SIGSTOP: the service deadline restarts the worker and moves its
work) and the other worker is restarted through the API. Every valid request gets exactly one
correct answer, every malformed one its 4xx, each distinct evaluation runs once, the restarts are
counted and the server ends healthy."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx

from forge_kernels.eval import EvalOptions
from forge_kernels.eval.service import EvalClient

KERNELS = Path(__file__).resolve().parents[2] / "eval" / "kernels"
FAST = EvalOptions(trials=1, alt_shape_trials=0, timeout_s=20.0, host_memory_mb=1024)

# kernel file -> (fault class expected on the relu task, distinct seeds)
MIX = {
    "relu_ok": ("none", 30),
    "value_mismatch": ("output_value_mismatch", 8),
    "shape_mismatch": ("output_shape_mismatch", 4),
    "nan_output": ("output_nan", 4),
    "syntax_error": ("syntax_error", 4),
    "segfault": ("segfault_abort", 5),
    "abort": ("segfault_abort", 3),
    "exit_early": ("segfault_abort", 4),
    "host_oom": ("host_oom", 3),
    "timeout": ("timeout", 3),
}
COPIES = 3  # every distinct evaluation is requested three times (a GRPO group's identical samples)


def _malformed(relu_source: str, max_code_bytes: int) -> list[tuple[dict | bytes, int]]:
    """Requests the server must refuse, with the status each must get."""
    ok = {"task": "level1/relu", "code": relu_source}
    cases: list[tuple[dict | bytes, int]] = [
        ({"task": "level1/relu"}, 422),
        ({**ok, "options": {"trials": 0}}, 422),
        ({**ok, "options": {"timeout_s": -1}}, 422),
        ({**ok, "task": "level9/nothing"}, 422),
        ({**ok, "task": 42}, 422),
        ({**ok, "options": {"device": "cuda"}}, 422),
        ({**ok, "request_id": "white space"}, 422),
        (b'{"task": "level1/relu", "code": "unterminated', 422),
        ({**ok, "code": "#" * (max_code_bytes + 1)}, 413),
    ]
    return cases * 6


def test_load_with_crashes_malformed_requests_and_worker_faults(server, relu, run):
    http = httpx.Client(base_url=server.url, timeout=60)
    before = {w["id"]: w for w in http.get("/v1/workers").json()}
    valid: list[tuple[str, str, EvalOptions, str]] = []  # (request id, code, options, expected fault)
    for name, (fault, seeds) in MIX.items():
        code = (KERNELS / f"{name}.py").read_text()
        for seed in range(seeds):
            options = FAST.model_copy(update={"seed": 7000 + seed, **({"timeout_s": 2.0} if name == "timeout" else {})})
            valid += [(uuid.uuid4().hex, code, options, fault) for _ in range(COPIES)]
    distinct = len(valid) // COPIES
    malformed = _malformed(relu.solution, server.config.max_code_bytes)
    assert len(valid) + len(malformed) >= 200

    async def hang_then_restart(client: httpx.AsyncClient) -> None:
        await asyncio.sleep(1.0)
        os.kill(before["cpu0"]["zygote_pid"], signal.SIGSTOP)  # cpu0's evaluations now hang
        await asyncio.sleep(2.0)
        restart = await client.post("/v1/workers/cpu1/restart")
        assert restart.status_code == 202, restart.text

    async def body() -> tuple[list, list, float]:
        async with EvalClient(server.url, max_retries=40, backoff_s=0.2, max_backoff_s=2.0) as client, \
                httpx.AsyncClient(base_url=server.url, timeout=60) as raw:
            start = time.monotonic()

            async def bad(payload: dict | bytes) -> int:
                if isinstance(payload, bytes):
                    resp = await raw.post("/v1/eval", content=payload, headers={"content-type": "application/json"})
                else:
                    resp = await raw.post("/v1/eval", json=payload)
                return resp.status_code

            answers, statuses, _ = await asyncio.gather(
                asyncio.gather(*(client.evaluate_response("level1/relu", code, options, request_id=rid)
                                 for rid, code, options, _ in valid)),
                asyncio.gather(*(bad(p) for p, _ in malformed)),
                hang_then_restart(raw),
            )
            return answers, statuses, time.monotonic() - start

    answers, statuses, elapsed = run(body(), timeout=300)

    # every valid request: exactly one answer, its own, with the right verdict
    assert [a.request_id for a in answers] == [rid for rid, *_ in valid]
    wrong = [(v[3], a.result.fault.value, a.result.error) for v, a in zip(valid, answers)
             if a.result.fault.value != v[3] or a.result.correct != (v[3] == "none")]
    assert not wrong, wrong[:5]
    assert statuses == [status for _, status in malformed]

    # each distinct evaluation ran once; the copies were served from the first
    after = {w["id"]: w for w in http.get("/v1/workers").json()}
    done = sum(after[w]["evaluations"] - before[w]["evaluations"] for w in after)
    assert done == distinct, (done, distinct)
    assert Counter(a.cached for a in answers)[False] == distinct

    # the hung worker was restarted by the deadline, the other through the API; both came back
    assert after["cpu0"]["restarts"] == before["cpu0"]["restarts"] + 1, after["cpu0"]
    assert "deadline" in after["cpu0"]["last_error"]
    assert after["cpu1"]["restarts"] == before["cpu1"]["restarts"] + 1, after["cpu1"]
    deadline = time.monotonic() + 60
    while http.get("/v1/health").json()["status"] != "ok":
        assert time.monotonic() < deadline, http.get("/v1/workers").json()
        time.sleep(0.2)
    assert after["cpu0"]["zygote_pid"] != before["cpu0"]["zygote_pid"]
    metrics = http.get("/metrics").text
    assert 'forge_eval_worker_restarts_total{worker="cpu0"}' in metrics
    assert 'forge_eval_retries_total{reason="deadline"}' in metrics  # cpu0's hung work moved on
    fresh = http.post("/v1/eval", json={"task": "level1/relu", "code": relu.solution,
                                        "options": FAST.model_copy(update={"seed": 8888}).model_dump(mode="json")})
    assert fresh.json()["result"]["correct"]
    print(f"{len(valid)} valid + {len(malformed)} malformed requests, {distinct} evaluations, {elapsed:.1f} s")
    http.close()

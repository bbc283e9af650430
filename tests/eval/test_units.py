"""Unit tests of the evaluator's pure parts: policy, channel, comparison, statistics, rewards, feedback."""

from __future__ import annotations

import time

import pytest
import torch

from forge_kernels.eval import EvalOptions, EvalResult, FaultClass, HackFinding, HackFlag, RuntimeStats
from forge_kernels.eval.channel import frame_tensor, parse_frames
from forge_kernels.eval.compare import Output, compare_trial
from forge_kernels.eval.faults import classify_exception
from forge_kernels.eval.static_checks import analyze_source
from forge_kernels.eval.profiling import is_candidate_kernel, profiling_ratio
from forge_kernels.eval.timing import TimingPrimitives, speedup, summarize
from forge_kernels.env.feedback import format_feedback
from forge_kernels.env.rewards import RewardConfig, compute_reward, register_reward, reward_names


def test_policy_finds_kernels_and_torch_ops():
    src = '''
import torch, triton
import triton.language as tl
import torch.nn.functional as F

@triton.autotune(configs=[], key=[])
@triton.jit
def k(x):
    tl.sum(x)

class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
    def forward(self, x):
        y = F.gelu(x) + x.sum() + x @ x
        return self.lin(y).view(-1)
'''
    r = analyze_source(src)
    assert list(r.kernels) == ["k"] and r.defines_model_new
    found = " ".join(r.torch_ops)
    for op in ("F.gelu", ".sum", "'@'", "self.lin"):
        assert op in found, found
    assert "view" not in found and "tl.sum" not in found


def test_policy_sandbox_and_syntax():
    assert analyze_source("def f(:\n").syntax_error.startswith("SyntaxError")
    r = analyze_source("import subprocess\nx = eval('1')\ny = getattr(torch, name)\ntime.perf_counter = f\n")
    assert len(r.sandbox) == 3 and r.timer_patches
    assert analyze_source("from torch.utils.cpp_extension import load_inline\n").foreign_kernels


def test_channel_roundtrip_and_rejects_bad_frames():
    import json
    import struct

    t = torch.randn(3, 4).to(torch.bfloat16)
    header = json.dumps({"kind": "tensor", "dtype": "bfloat16", "shape": [3, 4], "nbytes": 24}).encode()
    data = struct.pack("<I", len(header)) + header + t.view(torch.uint8).numpy().tobytes()
    frames, err = parse_frames(data)
    assert err is None and torch.equal(frames[0].tensor, t)
    frames, err = parse_frames(data[:-3])
    assert frames == [] and "does not fit" in err
    with pytest.raises(ValueError, match="unknown dtype 'object'"):
        frame_tensor(b"", "object", [0])
    with pytest.raises(ValueError, match="needs 16"):
        frame_tensor(b"\0" * 12, "float32", [4])


def _out(t: torch.Tensor) -> Output:
    return Output({"plain_tensor": True, "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                   "layout": "torch.strided", "device": "cpu"}, t)


def test_compare_tolerances_by_dtype():
    opts = EvalOptions(device="cpu")
    ref = torch.randn(256)
    assert compare_trial(0, "primary", [_out(ref)], [_out(ref + 5e-5)], opts, "cpu").result.passed
    v = compare_trial(0, "primary", [_out(ref)], [_out(ref + 1e-3)], opts, "cpu")
    assert v.fault is FaultClass.OUTPUT_VALUE_MISMATCH and v.result.max_abs_error == pytest.approx(1e-3, rel=1e-3)
    half = ref.to(torch.bfloat16)
    assert compare_trial(0, "primary", [_out(half)], [_out((ref * 1.004).to(torch.bfloat16))], opts, "cpu").result.passed
    nan = ref.clone()
    nan[3] = float("nan")
    assert compare_trial(0, "primary", [_out(ref)], [_out(nan)], opts, "cpu").fault is FaultClass.OUTPUT_NAN
    assert compare_trial(0, "primary", [_out(nan)], [_out(nan.clone())], opts, "cpu").result.passed
    ints = torch.arange(10)
    assert compare_trial(0, "primary", [_out(ints)], [_out(ints + 1)], opts, "cpu").fault is \
        FaultClass.OUTPUT_VALUE_MISMATCH


def test_classify_exception():
    assert classify_exception("forward", "OutOfMemoryError", "torch", "CUDA out of memory", False) is FaultClass.GPU_OOM
    assert classify_exception("forward", "OutOfResources", "triton.runtime.errors",
                              "out of resource: shared memory", False) is FaultClass.SHARED_MEMORY_EXCEEDED
    assert classify_exception("forward", "AcceleratorError", "torch", "CUDA error: an illegal memory access was "
                              "encountered", False) is FaultClass.ILLEGAL_MEMORY_ACCESS
    assert classify_exception("forward", "CompilationError", "triton.compiler.errors", "at 3:4", False) is \
        FaultClass.TRITON_COMPILE_ERROR
    assert classify_exception("forward", "ValueError", "builtins", "x", False) is FaultClass.RUNTIME_ERROR


def test_timing_statistics():
    stats = summarize([1.0, 1.1, 0.9, 1.0, 5.0, 1.0, 1.05, 0.95, 1.0, 1.0], trim_fraction=0.1)
    assert stats.median_ms == 1.0 and stats.samples == 10 and stats.min_ms == 0.9
    assert stats.trimmed_mean_ms < 1.1 and stats.spread_ms < 0.2
    s, s_std = speedup([2.0, 2.1, 1.9, 2.0, 2.05], [1.0, 1.02, 0.98, 1.0, 1.01])
    assert s == pytest.approx(2.0) and 0 < s_std < 0.2
    with pytest.raises(ValueError, match="positive"):
        speedup([1.0], [0.0])


def test_timer_identity_check_sees_module_patches(monkeypatch):
    prims = TimingPrimitives.capture()
    assert prims.still_installed() == []
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    assert prims.still_installed() == ["time.perf_counter"]


def test_profiling_ratio_names():
    kernels = {"relu_kernel": 30.0, "void at::native::vectorized_elementwise_kernel<4>": 70.0}
    assert profiling_ratio(kernels, ["relu_kernel"]) == pytest.approx(0.3)
    assert not is_candidate_kernel("vectorized_elementwise_kernel", ["elementwise_kernel"])
    assert profiling_ratio({}, ["k"]) is None


def _result(**kw) -> EvalResult:
    base = dict(task="t", device="cuda", compiled=True, correct=True, fault=FaultClass.NONE, timing_available=True,
                speedup=3.0, profiling_ratio=0.5)
    base.update(kw)
    return EvalResult(**base)


def test_rewards():
    r = _result()
    assert compute_reward(r, RewardConfig(name="kernelgym", speedup_cap=2.0)) == pytest.approx(1 + 2 + 0.5)
    assert compute_reward(r, RewardConfig(name="kevin")) == pytest.approx(0.3 + 3.0)
    assert compute_reward(r, RewardConfig(name="tritonforge")) == pytest.approx(1.0)
    wrong = _result(correct=False, fault=FaultClass.OUTPUT_VALUE_MISMATCH)
    assert compute_reward(wrong, RewardConfig(name="kernelgym")) == 0.0
    assert compute_reward(wrong, RewardConfig(name="tritonforge")) == pytest.approx(0.1)
    cpu = _result(timing_available=False, speedup=None, profiling_ratio=None)
    assert compute_reward(cpu, RewardConfig(name="kernelgym")) == 1.0
    assert compute_reward(_result(fault=FaultClass.INTERNAL_ERROR, correct=False)) is None
    warned = _result(hacks=[HackFinding(flag=HackFlag.TORCH_COMPUTE, message="m", rejected=False)])
    assert compute_reward(warned, RewardConfig(name="kevin", flag_penalty=0.5)) == pytest.approx(2.8)
    with pytest.raises(ValueError, match="unknown reward 'nope'"):
        RewardConfig(name="nope")


def test_user_registered_reward():
    @register_reward("test_binary")
    def binary(result, config):
        return 1.0 if result.correct else -1.0

    assert "test_binary" in reward_names()
    assert compute_reward(_result(correct=False, fault=FaultClass.TIMEOUT), RewardConfig(name="test_binary")) == -1.0


def test_feedback_text():
    bad = _result(correct=False, fault=FaultClass.OUTPUT_VALUE_MISMATCH, error="trial 0: output 0: 3 of 8 elements",
                  timing_available=False, speedup=None)
    text = format_feedback(bad)
    assert text.startswith("Result: output_value_mismatch") and "3 of 8" in text
    good = _result(runtime=RuntimeStats(median_ms=0.5, spread_ms=0.01, trimmed_mean_ms=0.5, min_ms=0.49, samples=30),
                   reference_runtime=RuntimeStats(median_ms=1.5, spread_ms=0.02, trimmed_mean_ms=1.5, min_ms=1.4,
                                                  samples=30), speedup_std=0.1)
    assert "speedup 3.00x" in format_feedback(good)
    assert len(format_feedback(bad.model_copy(update={"error": "x" * 5000}), max_chars=300)) <= 300
    # a long traceback keeps its end (the exception) and the sections after it
    frames = "".join(f'  File "torch/nn/modules/module.py", line {i}, in _call_impl\n' for i in range(100))
    long = bad.model_copy(update={"error": f"Traceback (most recent call last):\n{frames}TypeError: forward() takes 2 "
                                           "positional arguments but 3 were given"})
    text = format_feedback(long, max_chars=600)
    assert len(text) <= 600 and text.startswith("Result: output_value_mismatch")
    assert "Details:\n[... trimmed]\n" in text and text.count("[... trimmed]") == 1
    assert "TypeError: forward() takes 2 positional arguments but 3 were given" in text
    assert "Traceback (most recent call last)" not in text


def test_a_task_tolerance_loosens_but_never_tightens_the_evaluators():
    from forge_kernels.eval.results import EvalOptions, loosened_for
    from forge_kernels.tasks.loaders import load_builtin_tasks

    (matmul,) = load_builtin_tasks(levels=(1,), names=["level1/matmul"])
    assert matmul.tolerance == {"float32": 2e-3}
    opts = loosened_for(matmul, EvalOptions())
    assert (opts.tolerances["float32"].atol, opts.tolerances["float32"].rtol) == (2e-3, 2e-3)
    assert opts.tolerances["float16"] == EvalOptions().tolerances["float16"]
    strict = EvalOptions(tolerances={"float32": {"atol": 1e-2, "rtol": 1e-2}})
    assert loosened_for(matmul, strict) is strict  # already looser: untouched
    tight = matmul.model_copy(update={"tolerance": {"float32": 1e-6}})
    assert loosened_for(tight, EvalOptions()).tolerances["float32"].atol == 1e-4

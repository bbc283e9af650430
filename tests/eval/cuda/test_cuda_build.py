"""Building CUDA candidates with the real nvcc on this CPU machine: compile errors classified from
the compiler output, the build cache, the compile deadline, and what a CPU result says.

Default CI runs the fast ones (a torch-free ``.cu`` fails nvcc in seconds); whole builds, which
compile torch's headers (minutes on 2 busy cores), are marked slow.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
from pathlib import Path

import pytest
import torch

from forge_kernels.env.feedback import format_feedback
from forge_kernels.eval import EvalOptions, Evaluator, FaultClass
from forge_kernels.eval.cuda.build import build_extension, toolchain, trim_compiler_output
from forge_kernels.eval.cuda.child import install_prebuilt_loader
from forge_kernels.eval.cuda.source import extension_specs

pytestmark = pytest.mark.skipif(toolchain().nvcc is None, reason="needs nvcc (CUDA toolkit)")


def test_device_code_error_classified_with_trimmed_nvcc_output(cpu_evaluator, builtin, candidate, build_dir):
    r = cpu_evaluator.evaluate(builtin["level1/relu"], candidate("compile_error"))
    assert r.fault is FaultClass.CUDA_COMPILE_ERROR and not r.compiled and not r.correct, (r.fault, r.error)
    assert 'cuda.cu(7): error: identifier "zero" is undefined' in r.error
    assert "fmaxf(x[i], zero)" in r.error and "^" in r.error  # the source line and nvcc's caret
    assert build_dir not in r.error and "/tmp" not in r.error  # no build paths leak into feedback
    assert "cuda.cu is your cuda_sources" in r.error
    text = format_feedback(r, language="CUDA")
    assert text.startswith("Result: cuda_compile_error. The CUDA extension failed to build")
    assert 'identifier "zero" is undefined' in text


def test_same_source_is_not_rebuilt(cpu_evaluator, builtin, candidate, build_dir):
    first = cpu_evaluator.evaluate(builtin["level1/relu"], candidate("compile_error"))
    (spec,) = extension_specs(ast.parse(candidate("compile_error")))
    cached = build_extension(spec, build_dir)
    assert cached.cached and cached.status == "compile_error" and cached.error and cached.error in first.error
    again = cpu_evaluator.evaluate(builtin["level1/relu"], candidate("compile_error"))
    assert again.error == first.error and again.fault is first.fault
    build_dirs = [p for p in Path(build_dir).iterdir() if p.is_dir() and p.name != "objects"]
    assert [p.name for p in build_dirs].count(cached.key) == 1
    files = {p.name for p in (Path(build_dir) / cached.key).iterdir()}
    assert {"main.cpp", "cuda.cu", "build.log", "result.json"} <= files


def test_compile_deadline_gives_a_clear_fault_and_is_not_cached(builtin, candidate, tmp_path):
    with Evaluator(EvalOptions(device="cpu", language="cuda", compile_timeout_s=1.0),
                   cuda_build_dir=str(tmp_path)) as ev:
        r = ev.evaluate(builtin["level1/relu"], candidate("relu_raw_ok"))  # torch/extension.h alone takes > 1 s
    assert r.fault is FaultClass.COMPILE_TIMEOUT and not r.compiled, (r.fault, r.error)
    assert "compilation exceeded 1 s" in r.error and "relu_raw_ext" in r.error
    assert not list(tmp_path.glob("*/result.json"))  # a loaded machine may finish next time
    assert "took too long" in format_feedback(r, language="CUDA")


def test_host_compiler_errors_are_trimmed_to_diagnostics(tmp_path):
    (tmp_path / "main.cpp").write_text("#include <vector>\nint f() { return undeclared_value; }\n"
                                       "int g() { std::vector<int> v; return v.size() + ; }\n")
    out = subprocess.run([toolchain().cxx, "-c", "main.cpp", "-o", os.devnull], cwd=tmp_path, capture_output=True,
                         text=True)
    assert out.returncode != 0
    text = trim_compiler_output(out.stderr, str(tmp_path))
    assert "main.cpp:2:" in text and "undeclared_value" in text and "main.cpp:3:" in text
    assert str(tmp_path) not in text


def test_problems_visible_in_the_text_fail_before_compiling(cpu_evaluator, builtin, candidate, build_dir):
    before = set(os.listdir(build_dir))
    system = candidate("relu_raw_ok").replace("auto xc = x.contiguous();", 'system("id"); auto xc = x.contiguous();')
    r = cpu_evaluator.evaluate(builtin["level1/relu"], system)
    assert r.fault is FaultClass.SANDBOX_VIOLATION and "system(" in r.error
    torch_op = candidate("relu_raw_ok").replace("return y;", "return torch::relu(y);")
    r = cpu_evaluator.evaluate(builtin["level1/relu"], torch_op)
    assert r.fault is FaultClass.FORBIDDEN_OP and "torch::relu(" in r.error
    unresolved = candidate("relu_raw_ok").replace("cuda_sources=cuda_source", "cuda_sources=cuda_source.strip()")
    r = cpu_evaluator.evaluate(builtin["level1/relu"], unresolved)
    assert r.fault is FaultClass.CUDA_COMPILE_ERROR and "cannot be resolved" in r.error
    triton = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
    r = cpu_evaluator.evaluate(builtin["level1/relu"], triton)
    assert r.fault is FaultClass.CUDA_COMPILE_ERROR and "no load_inline(...) call found" in r.error
    assert set(os.listdir(build_dir)) == before  # nothing was compiled for any of them


@pytest.mark.slow
@pytest.mark.timeout(1800)  # torch's headers through nvcc and g++: minutes on 2 busy cores
def test_correct_candidate_builds_and_says_correctness_is_unavailable(cpu_evaluator, builtin, candidate):
    r = cpu_evaluator.evaluate(builtin["level1/relu"], candidate("relu_ok"))
    assert r.compiled and r.fault is FaultClass.NONE and not r.correct, (r.fault, r.error)
    assert r.correctness_note and "cannot load or run it" in r.correctness_note
    assert r.timing_note and "GPU" in r.timing_note and not r.timing_available
    assert r.device == "cpu (nvcc build only)"
    assert "correctness unavailable on CPU" in format_feedback(r, language="CUDA")


@pytest.mark.slow
@pytest.mark.timeout(1800)  # torch's headers through nvcc and g++: minutes on 2 busy cores
def test_header_heavy_compile_error_and_shared_objects(cpu_evaluator, builtin, candidate, build_dir):
    """An error in a .cu that includes torch (the common case); main.cpp is shared with relu_ok's."""
    broken = candidate("relu_ok").replace("y[i] = v > 0.f ? v : 0.f;", "y[i] = v > 0.f ? v : 0.f")
    r = cpu_evaluator.evaluate(builtin["level1/relu"], broken)
    assert r.fault is FaultClass.CUDA_COMPILE_ERROR, (r.fault, r.error)
    assert "cuda.cu(" in r.error and "error: expected a \";\"" in r.error


def _import_candidate(code: str, path: Path):
    path.write_text(code)
    spec = importlib.util.spec_from_file_location("cuda_candidate_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_child_loader_refuses_arguments_it_has_no_build_for(monkeypatch, candidate, tmp_path):
    from torch.utils import cpp_extension

    monkeypatch.setattr(cpp_extension, "load_inline", cpp_extension.load_inline)  # restored after the test
    install_prebuilt_loader({})
    with pytest.raises(ImportError, match="differ from the ones in the source text"):
        _import_candidate(candidate("relu_raw_ok"), tmp_path / "candidate.py")
    with pytest.raises(ImportError, match="extra_include_paths is not allowed"):
        cpp_extension.load_inline("e", "", "int x;", extra_include_paths=["/etc"])


@pytest.mark.slow
@pytest.mark.timeout(1800)  # torch's headers through nvcc and g++: minutes on 2 busy cores
def test_built_library_is_the_module_the_candidate_asked_for(monkeypatch, candidate, build_dir, tmp_path):
    """The CPU torch can import a library whose code needs no CUDA runtime symbols from torch: the
    prebuilt loader hands it to the candidate's load_inline call (what the GPU child does)."""
    from torch.utils import cpp_extension

    code = candidate("relu_raw_ok")
    (spec,) = extension_specs(ast.parse(code))
    build = build_extension(spec, build_dir)
    assert build.ok, build.error
    monkeypatch.setattr(cpp_extension, "load_inline", cpp_extension.load_inline)
    install_prebuilt_loader({spec.key(): build.library})
    module = _import_candidate(code, tmp_path / "candidate.py")
    assert module.ext.__name__ == "relu_raw_ext" and module.ext.__file__ == build.library
    assert module.ext.relu_raw.__doc__.startswith("relu_raw(arg0: torch.Tensor) -> torch.Tensor")
    assert issubclass(module.ModelNew, torch.nn.Module)

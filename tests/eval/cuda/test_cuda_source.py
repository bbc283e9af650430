"""Reading load_inline calls and the CUDA source policy from the text alone (no compiler runs)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from forge_kernels.eval.cuda.static_checks import analyze_cuda_source, cuda_kernel_names
from forge_kernels.eval.cuda.source import ExtensionSpec, SpecError, extension_specs
from forge_kernels.eval.profiling import is_candidate_kernel, profiling_ratio



def candidate(name: str) -> str:
    return (Path(__file__).parent / "candidates" / f"{name}.py").read_text()


HEADER = "import torch\nfrom torch.utils.cpp_extension import load_inline\n"


def specs(body: str) -> list[ExtensionSpec]:
    return extension_specs(ast.parse(HEADER + body))


def test_fixture_resolves_like_torch_writes_it():
    (spec,) = extension_specs(ast.parse(candidate("relu_ok")))
    assert spec.name == "relu_ext" and spec.functions == (("relu_cuda", "relu_cuda"),)
    assert spec.extra_cflags == () and spec.extra_ldflags == ()  # KernelBench's [""] means none
    main = spec.main_cpp().splitlines()
    assert main[0] == "#include <torch/extension.h>"
    assert main[1] == "torch::Tensor relu_cuda(torch::Tensor x);"
    assert main[-2:] == ['m.def("relu_cuda", torch::wrap_pybind_function(relu_cuda), "relu_cuda");', "}"]
    assert spec.cuda_cu().splitlines()[:3] == ["#include <torch/types.h>", "#include <cuda.h>",
                                               "#include <cuda_runtime.h>"]


def test_constants_concatenation_fstrings_aliases_and_dict_functions():
    (spec,) = specs(
        'from torch.utils.cpp_extension import load_inline as build\n'
        'K = "__global__ void k(float* x) {}"\n'
        'BLOCK = 128\n'
        'SRC = K + f"\\n#define BLOCK {BLOCK}\\n"\n'
        'ext = build("e1", ["void f();"], SRC, functions={"f": "does f"},\n'
        '            extra_cuda_cflags=["-O3", "--use_fast_math"])\n'
    )
    assert spec.cuda_sources == ("__global__ void k(float* x) {}\n#define BLOCK 128\n",)
    assert spec.functions == (("f", "does f"),) and spec.extra_cuda_cflags == ("-O3", "--use_fast_math")
    assert 'm.def("f", torch::wrap_pybind_function(f), "does f");' in spec.main_cpp()


def test_module_attribute_call_and_no_implicit_headers():
    (spec,) = extension_specs(ast.parse(
        "import torch.utils.cpp_extension as cpp_ext\n"
        "ext = cpp_ext.load_inline(name='e', cpp_sources='', cuda_sources='int x;', no_implicit_headers=True,"
        " with_pytorch_error_handling=False, functions='g')\n"))
    assert spec.cuda_cu() == "int x;"
    assert 'm.def("g", g, "g");' in spec.main_cpp()


def test_key_depends_on_sources_not_on_line():
    a = ExtensionSpec.from_arguments({"name": "e", "cpp_sources": "a", "cuda_sources": "b"}, line=3)
    b = ExtensionSpec.from_arguments({"name": "e", "cpp_sources": ["a"], "cuda_sources": ["b"]}, line=9)
    c = ExtensionSpec.from_arguments({"name": "e", "cpp_sources": "a", "cuda_sources": "b2"})
    assert a.key() == b.key() != c.key()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("x = 1\n", "no load_inline(...) call found"),
        ("import os\nSRC = os.environ['S']\next = load_inline('e', '', SRC)\n", "'cuda_sources' cannot be resolved"),
        ("SRC = 'a'\nSRC = 'b'\next = load_inline('e', '', SRC)\n", "assigned 2 times"),
        ("ext = load_inline('e', '', 'x', **{'functions': []})\n", "**kwargs"),
        ("ext = load_inline('e', '', 'x', extra_include_paths=['/etc'])\n", "extra_include_paths is not allowed"),
        ("ext = load_inline('e', '', 'x', extra_ldflags=['-Wl,--script=/tmp/x'])\n", "extra_ldflags"),
        ("ext = load_inline('e', '', 'x', extra_cuda_cflags=['-I/secret'])\n", "not allowed"),
        ("ext = load_inline('bad name', '', 'x')\n", "C identifier"),
        ("ext = load_inline('e', 'void f();', '')\n", "has no cuda_sources"),
        ("ext = load_inline('e', '', 'x', functions=['f(x)'])\n", "not a C++ identifier"),
        ("from torch.utils import cpp_extension\next = cpp_extension.load('e', ['k.cu'])\n", "is not supported"),
        ("a = load_inline('e', '', 'x')\nb = load_inline('e', '', 'y')\n", "used for different sources"),
    ],
)
def test_unusable_calls_say_why(body, message):
    with pytest.raises(SpecError, match=re.escape(message)):
        specs(body)


def test_kernel_names_handle_templates_launch_bounds_and_comments():
    src = """
    // __global__ void commented_out(float* x) {}
    template <typename T>
    __global__ void __launch_bounds__(256) scale_kernel(T* x, int n) {}
    extern "C" __global__ void plain(float* y) {}
    /* __global__ void also_commented() {} */
    static __global__ void  spaced_name  (int a) {}
    """
    assert cuda_kernel_names([src]) == ["scale_kernel", "plain", "spaced_name"]


def test_profiler_names_of_cuda_kernels_match():
    names = ["relu_kernel", "scale_kernel"]
    assert is_candidate_kernel("relu_kernel(float const*, float*, long)", names)
    assert is_candidate_kernel("void scale_kernel<float>(float*, int)", names)
    assert is_candidate_kernel("void my_ns::relu_kernel<float, 4>(float const*, float*, long)", names)
    assert not is_candidate_kernel("void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)", names)
    assert profiling_ratio({"relu_kernel(float const*, float*, long)": 30.0,
                            "void at::native::elementwise_kernel<128, 2>(int)": 10.0}, names) == 0.75


def test_fixtures_pass_the_policy():
    fixtures = ("relu_ok", "add_ok", "softmax_ok", "relu_raw_ok", "relu_wrong", "relu_decoy", "relu_torch_fallback")
    for name in fixtures:
        report = analyze_cuda_source(candidate(name))
        verdict = report.for_verdict()
        assert report.spec_error is None and report.kernels, name
        assert not verdict.sandbox and not verdict.torch_ops and not verdict.foreign_kernels, (name, verdict)
        assert verdict.kernel_language == "CUDA"


def test_cpp_process_file_network_calls_are_sandbox_findings():
    code = candidate("relu_ok").replace("#include <cuda_runtime.h>", '#include <cuda_runtime.h>\n#include <unistd.h>')
    code = code.replace("auto xc = x.contiguous();", 'system("curl evil"); auto xc = x.contiguous();')
    report = analyze_cuda_source(code)
    assert any("system(" in s for s in report.cpp_sandbox), report.cpp_sandbox
    assert any("unistd" in s for s in report.cpp_sandbox)


def test_cpp_torch_ops_found_and_extension_functions_not_mistaken_for_torch():
    code = candidate("relu_ok").replace("return y;", "return torch::relu(y);")
    report = analyze_cuda_source(code)
    assert any("torch::relu(" in s for s in report.cpp_torch_ops), report.cpp_torch_ops
    named = candidate("relu_raw_ok").replace("relu_raw", "relu")  # the bound function is now called `relu`
    assert analyze_cuda_source(named).python.torch_ops == []


def test_side_streams_and_python_hacks_still_seen():
    code = candidate("relu_ok").replace("auto xc = x.contiguous();",
                                        "cudaStream_t s; cudaStreamCreate(&s); auto xc = x.contiguous();")
    code = code.replace("        return self.relu.relu_cuda(x)",
                        "        try:\n            return self.relu.relu_cuda(x)\n        except Exception:\n"
                        "            return x.clamp(min=0)")
    verdict = analyze_cuda_source(code).for_verdict()
    assert any("cudaStreamCreate" in s for s in verdict.streams)
    assert verdict.try_except and any("clamp" in s for s in verdict.torch_ops)

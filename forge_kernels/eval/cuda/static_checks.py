"""Static checks of a CUDA candidate: the Python module (the Triton checks, minus the ones that
forbid ``load_inline`` itself) and its C++/CUDA sources.

The C++ checks are textual and conservative: they catch what is plainly there (process, file and
network calls; ``torch::``/``at::`` compute ops in the wrapper; extra streams). What text can
hide is caught at run time on a GPU (the aten audit sees ops dispatched from C++ too, and the
profiler sees which kernels ran). Native code is outside the audit hook's reach: for CUDA
candidates the sandbox rests on the child's OS-level isolation (namespaces, limits, process group).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from forge_kernels.eval.cuda.source import ExtensionSpec, SpecError, extension_specs
from forge_kernels.eval.static_checks import TORCH_COMPUTE_NAMES, StaticReport, analyze_source, parse_source

__all__ = ["CudaStaticReport", "analyze_cuda_source", "cuda_kernel_names"]

_GLOBAL = re.compile(r"\b__global__\b([^{;]*)")
_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\([^)]*\)")
_FIRST_CALLABLE = re.compile(r"(\w+)\s*\(")
_CPP_SANDBOX = re.compile(
    r"\b(system|popen|fork|vfork|execl|execlp|execle|execv|execvp|execve|posix_spawn|socket|connect|dlopen|"
    r"dlsym|fopen|freopen|open|creat|unlink|remove|rename|mmap|ptrace|kill|syscall|setenv|putenv)\s*\("
    r"|\b(std::)?(ofstream|ifstream|fstream)\b|#\s*include\s*[<\"](sys/socket|netinet/\w+|arpa/\w+|dlfcn|"
    r"unistd|fstream|spawn|sys/mman|sys/ptrace|sys/syscall)(\.h)?[>\"]"
)
_CPP_TORCH_OP = re.compile(r"\b(?:torch|at)::(?:native::)?(?:nn::functional::)?(\w+)\s*\(")
_CPP_STREAM = re.compile(r"\b(cudaStreamCreate\w*|cudaStreamBeginCapture|cudaGraphLaunch)\b")
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_PY_LOAD_INLINE = re.compile(r": (uses \.(load_inline|cpp_extension)|imports torch\.utils\.cpp_extension(\.\w+)?"
                             r"( \(not a Triton kernel\))?|imports torch\.utils)$")


def cuda_kernel_names(sources: list[str]) -> list[str]:
    """Names of the ``__global__`` functions in CUDA sources, in order of appearance."""
    names: list[str] = []
    for src in sources:
        for m in _GLOBAL.finditer(_COMMENTS.sub("", src)):
            name = _FIRST_CALLABLE.search(_LAUNCH_BOUNDS.sub(" ", m.group(1)))  # the declarator's name
            if name and name.group(1) not in names:
                names.append(name.group(1))
    return names


@dataclass
class CudaStaticReport:
    """What the source shows: the resolved extensions, their kernels, and the merged findings."""

    python: StaticReport
    specs: list[ExtensionSpec] = field(default_factory=list)
    spec_error: str | None = None
    kernels: list[str] = field(default_factory=list)
    cpp_sandbox: list[str] = field(default_factory=list)
    cpp_torch_ops: list[str] = field(default_factory=list)
    cpp_streams: list[str] = field(default_factory=list)

    def for_verdict(self) -> StaticReport:
        """The report the shared verdict reads: CUDA kernels as the candidate's kernels (no line
        ranges: their code is not Python), C++ findings merged into the Python ones."""
        py = self.python
        return replace(py, kernels={k: (0, 0) for k in self.kernels}, torch_ops=py.torch_ops + self.cpp_torch_ops,
                       sandbox=py.sandbox + self.cpp_sandbox, streams=py.streams + self.cpp_streams,
                       kernel_language="CUDA")


def _findings(pattern: re.Pattern[str], spec: ExtensionSpec, what: str,
              keep: Callable[[re.Match[str]], bool] = lambda m: True) -> list[str]:
    out = []
    for part, sources in (("cpp_sources", spec.cpp_sources), ("cuda_sources", spec.cuda_sources)):
        text = _COMMENTS.sub("", "\n".join(sources))
        for m in pattern.finditer(text):
            if not keep(m):
                continue
            line = text.count("\n", 0, m.start()) + 1
            out.append(f"extension {spec.name!r} {part} line {line}: {what} {m.group(0).strip()}")
    return out


def analyze_cuda_source(source: str) -> CudaStaticReport:
    """Static findings for a CUDA candidate (a syntax error stops the analysis, as for Triton)."""
    python = analyze_source(source)
    report = CudaStaticReport(python=python)
    if python.syntax_error:
        return report
    try:
        report.specs = extension_specs(parse_source(source))
    except SpecError as err:
        report.spec_error = str(err)
    # load_inline is the point here: drop the Triton policy's findings against it
    python.sandbox = [s for s in python.sandbox if not _PY_LOAD_INLINE.search(s)]
    python.foreign_kernels = [s for s in python.foreign_kernels if "cpp_extension" not in s]
    bound = {f for spec in report.specs for f, _ in spec.functions}
    python.torch_ops = [s for s in python.torch_ops if s.rsplit(".", 1)[-1].removesuffix("()") not in bound]
    for spec in report.specs:
        report.cpp_sandbox += _findings(_CPP_SANDBOX, spec, "calls/includes")
        report.cpp_streams += _findings(_CPP_STREAM, spec, "uses")
        report.cpp_torch_ops += _findings(_CPP_TORCH_OP, spec, "torch op",
                                          keep=lambda m: m.group(1) in TORCH_COMPUTE_NAMES)
    report.kernels = cuda_kernel_names([src for spec in report.specs for src in spec.cuda_sources])
    return report

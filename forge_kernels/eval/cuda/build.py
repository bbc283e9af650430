"""Build a candidate's ``load_inline`` extension the way torch would, outside the sandbox, cached.

The evaluator (never the sandboxed child) runs the compilers: ``nvcc`` for ``cuda.cu``, the host
C++ compiler for ``main.cpp`` (torch's header plus the pybind bindings), then links ``<name>.so``
with torch's flags. This works on a CPU-only machine too (a CPU torch wheel ships every header;
nothing is loaded), so compile errors are classified everywhere.

* **Cache per candidate hash**: ``<root>/<key>/`` holds the sources, ``build.log``, the library and
  ``result.json``; a spec built before (successfully or with a compile error) is never rebuilt.
  Object files are also cached by the hash of their compile command and source
  (``<root>/objects/``), so candidates that share ``cpp_sources`` compile ``main.cpp`` once.
* **Bounded**: both compilers run at once in their own process groups, killed at the deadline
  (a timeout is reported, and not cached).
* **Feedback**: compiler output is cut to its error diagnostics with context, build paths removed.
"""

from __future__ import annotations

import contextlib

import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from forge_kernels.eval.cuda.source import ExtensionSpec

__all__ = ["BuildResult", "Toolchain", "build_extension", "default_build_root", "trim_compiler_output", "toolchain"]

BuildStatus = Literal["ok", "compile_error", "timeout", "toolchain_missing"]
_NVCC_FLAGS = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
               "-D__CUDA_NO_HALF2_OPERATORS__", "--expt-relaxed-constexpr"]
_DIAGNOSTIC = re.compile(r"(\(\d+\): (error|catastrophic error)|:\d+:\d+: (fatal )?error|: error:|error: |"
                         r"undefined reference|ld returned|collect2:)", re.IGNORECASE)
_CONTEXT_LINES = 4
_MAX_ERRORS = 6


def default_build_root() -> str:
    """``$FORGE_CUDA_BUILD_DIR``, else ``~/.cache/forge_kernels/cuda_builds``."""
    return os.environ.get("FORGE_CUDA_BUILD_DIR") or str(Path.home() / ".cache" / "forge_kernels" / "cuda_builds")


@dataclass(frozen=True)
class Toolchain:
    """Compilers, paths and flags for building torch CUDA extensions on this machine."""

    nvcc: str | None
    cxx: str
    cuda_home: str | None
    include_dirs: tuple[str, ...]
    torch_lib: str
    libraries: tuple[str, ...]
    arch: str  # e.g. "90" for sm_90
    std: str
    abi_flags: tuple[str, ...]  # torch's C++ ABI macro: the extension must match torch
    fingerprint: str  # compiler versions, torch version, arch: part of every cache key

    def cxx_flags(self, name: str) -> list[str]:
        return [f"-DTORCH_EXTENSION_NAME={name}", "-DTORCH_API_INCLUDE_EXTENSION_H", *self.abi_flags,
                *[f for d in self.include_dirs for f in ("-isystem", d)], "-fPIC", f"-std={self.std}", "-O2"]

    def nvcc_flags(self, name: str) -> list[str]:
        return [f"-DTORCH_EXTENSION_NAME={name}", "-DTORCH_API_INCLUDE_EXTENSION_H", *self.abi_flags,
                *[f for d in self.include_dirs for f in ("-isystem", d)], *_NVCC_FLAGS,
                f"-gencode=arch=compute_{self.arch},code=sm_{self.arch}", "--compiler-options", "-fPIC",
                f"-std={self.std}", "-O2"]

    def link_flags(self) -> list[str]:
        cuda_lib = []
        if self.cuda_home:
            lib = os.path.join(self.cuda_home, "lib64")
            lib = lib if os.path.isdir(lib) else os.path.join(self.cuda_home, "lib")
            cuda_lib = [f"-L{lib}", "-lcudart"]
        return ["-shared", f"-L{self.torch_lib}", *[f"-l{x}" for x in self.libraries], f"-Wl,-rpath,{self.torch_lib}",
                *cuda_lib]


def _run_version(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip().splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out[-1] if out and "nvcc" in cmd[0] else (out[0] if out else "unknown")


def _cuda_home() -> str | None:
    for candidate in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if candidate and os.path.isfile(os.path.join(candidate, "bin", "nvcc")):
            return candidate
    nvcc = shutil.which("nvcc")
    return os.path.dirname(os.path.dirname(os.path.realpath(nvcc))) if nvcc else None


def _detect_arch() -> str:
    """``TORCH_CUDA_ARCH_LIST``'s last entry, else the first GPU's compute capability (nvidia-smi),
    else 9.0 (H100: what a CPU machine compiles for, to check the code)."""
    listed = os.environ.get("TORCH_CUDA_ARCH_LIST", "").replace(",", " ").replace(";", " ").split()
    if listed:
        return listed[-1].split("+")[0].replace(".", "")
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):  # no nvidia-smi, or it hangs: the default
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.split()
        if out and re.match(r"^\d+\.\d+$", out[0]):
            return out[0].replace(".", "")
    return "90"


def _torch_cxx_standard(cpp_extension_file: str) -> str:
    """The C++ standard this torch builds its extensions with (torch 2.13: c++20; 2.11: c++17), read
    from its ``cpp_extension`` module, which has no public accessor for it."""
    text = Path(cpp_extension_file).read_text()
    return "c++20" if text.count("-std=c++20") > text.count("-std=c++17") else "c++17"


@functools.lru_cache(maxsize=1)
def toolchain() -> Toolchain:
    """This machine's toolchain (looked up once per process)."""
    import torch
    from torch.utils import cpp_extension

    cuda_home = _cuda_home()
    nvcc = os.path.join(cuda_home, "bin", "nvcc") if cuda_home else None
    cxx = os.environ.get("CXX") or "c++"
    includes = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]
    if cuda_home:
        includes.append(os.path.join(cuda_home, "include"))
    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    libs = ["c10", "torch_cpu", "torch", "torch_python"]
    if os.path.exists(os.path.join(torch_lib, "libc10_cuda.so")):  # absent from CPU wheels
        libs[1:1] = ["c10_cuda"]
        libs.insert(3, "torch_cuda")
    arch = _detect_arch()
    # torch's C++ ABI (pybind11's own ABI keys are internal to pybind11 since torch 2.9)
    abi = (f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",)
    std = _torch_cxx_standard(cpp_extension.__file__)
    fingerprint = "|".join([_run_version([nvcc, "--version"]) if nvcc else "no-nvcc", _run_version([cxx, "--version"]),
                            torch.__version__, arch, std, ",".join(libs), " ".join(abi)])
    return Toolchain(nvcc=nvcc, cxx=cxx, cuda_home=cuda_home, include_dirs=tuple(includes), torch_lib=torch_lib,
                     libraries=tuple(libs), arch=arch, std=std, abi_flags=abi, fingerprint=fingerprint)


@dataclass
class BuildResult:
    """The outcome of building one extension."""

    status: BuildStatus
    key: str
    library: str | None = None  # path of <name>.so when status is ok
    error: str | None = None  # trimmed diagnostics for feedback
    seconds: float = 0.0  # compile + link time of the build that produced this result
    cached: bool = False  # True: taken from the cache, no compiler ran

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def trim_compiler_output(text: str, build_dir: str | None = None, max_chars: int = 3000) -> str:
    """The error diagnostics of a compiler log, each with a few lines of context, paths stripped."""
    if build_dir:
        text = text.replace(os.path.realpath(build_dir) + os.sep, "").replace(build_dir + os.sep, "")
    text = re.sub(r"/\S*/(main\.cpp|cuda\.cu)\b", r"\1", text)
    lines = text.splitlines()
    picked: list[str] = []
    errors = 0
    i = 0
    while i < len(lines) and errors < _MAX_ERRORS:
        if _DIAGNOSTIC.search(lines[i]) and "warning" not in lines[i].lower().split("error")[0]:
            errors += 1
            picked.extend(lines[i: i + 1 + _CONTEXT_LINES])
            i += 1 + _CONTEXT_LINES
            continue
        i += 1
    summary = next((ln for ln in lines if re.search(r"\d+ errors? detected|error: ld returned", ln)), None)
    if summary and summary not in picked:
        picked.append(summary)
    out = "\n".join(picked).strip() or "\n".join(lines[-30:]).strip()
    return out if len(out) <= max_chars else out[: max_chars - 15] + "\n[... trimmed]"


def _object_key(cmd: list[str], source: str) -> str:
    return hashlib.sha256(json.dumps([cmd, source]).encode()).hexdigest()[:32]


def _start(cmd: list[str], log_path: Path, cwd: Path) -> subprocess.Popen[bytes]:
    log = open(log_path, "wb")  # noqa: SIM115 - closed by _finish
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    log.close()
    return proc


def _kill(procs: list[subprocess.Popen[bytes]]) -> None:
    for q in procs:
        if q.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):  # the group already exited
                os.killpg(q.pid, signal.SIGKILL)
            q.wait()


def _wait_all(procs: list[subprocess.Popen[bytes]], deadline: float) -> bool:
    """Wait for every process; stop the others as soon as one fails (its errors are the feedback),
    and all of them (with their children) at the deadline. False on timeout."""
    while [p.poll() for p in procs].count(None):  # poll every process (any() would stop at the first)
        if time.monotonic() >= deadline:
            _kill(procs)
            return False
        if any(p.returncode not in (None, 0) for p in procs):
            _kill(procs)
            return True
        time.sleep(0.05)
    return True


def _compile_objects(spec: ExtensionSpec, tc: Toolchain, work: Path, objects: Path,
                     deadline: float) -> tuple[BuildStatus, list[Path], str]:
    """Compile main.cpp and cuda.cu (at once; cached objects skipped). Returns status, objects, log."""
    assert tc.nvcc is not None
    (work / "main.cpp").write_text(spec.main_cpp())
    (work / "cuda.cu").write_text(spec.cuda_cu())
    jobs = [
        ("main.cpp", [tc.cxx, *tc.cxx_flags(spec.name), *spec.extra_cflags, "-c", "main.cpp"], spec.main_cpp()),
        ("cuda.cu", [tc.nvcc, *tc.nvcc_flags(spec.name), *spec.extra_cuda_cflags, "-c", "cuda.cu"], spec.cuda_cu()),
    ]
    outputs: list[Path] = []
    running: list[tuple[str, Path, Path, subprocess.Popen[bytes]]] = []
    for source, cmd, text in jobs:
        key_cmd = [os.path.basename(cmd[0]), *cmd[1:], tc.fingerprint]
        final = objects / f"{_object_key(key_cmd, text)}.o"
        outputs.append(final)
        if final.exists():
            continue
        partial = work / f"{source}.o"
        running.append((source, final, partial, _start([*cmd, "-o", partial.name], work / f"{source}.log", work)))
    finished = _wait_all([p for *_, p in running], deadline)
    log = "\n".join((work / f"{s}.log").read_text(errors="replace") for s, *_ in running)
    if not finished:
        return "timeout", outputs, log
    failed = [s for s, _, _, p in running if p.returncode not in (0, -signal.SIGKILL)]
    if failed:
        return "compile_error", outputs, "\n".join((work / f"{s}.log").read_text(errors="replace") for s in failed)
    for _, final, partial, _ in running:
        os.replace(partial, final)  # atomic: a concurrent build sees a whole object or none
    return "ok", outputs, log


def _build(spec: ExtensionSpec, tc: Toolchain, work: Path, objects: Path, timeout_s: float) -> BuildResult:
    """Compile and link in ``work``; an ok result's ``library`` is set by the caller (where it ends up)."""
    start = time.monotonic()
    deadline = start + timeout_s
    status, objs, log = _compile_objects(spec, tc, work, objects, deadline)
    if status == "ok":
        link = _start([tc.cxx, *[str(o) for o in objs], *tc.link_flags(), *spec.extra_ldflags,
                       "-o", f"{spec.name}.so"], work / "link.log", work)
        if not _wait_all([link], deadline):
            status = "timeout"
        elif link.returncode != 0:
            status, log = "compile_error", (work / "link.log").read_text(errors="replace")
    (work / "build.log").write_text(log)
    seconds = time.monotonic() - start
    if status == "timeout":
        return BuildResult("timeout", work.name, error=f"compilation exceeded {timeout_s:g} s and was stopped",
                           seconds=seconds)
    error = trim_compiler_output(log, str(work)) if status == "compile_error" else None
    return BuildResult(status, work.name, error=error, seconds=seconds)


def _write_result(work: Path, result: BuildResult) -> None:
    tmp = work / "result.json.tmp"
    tmp.write_text(json.dumps({"status": result.status, "library": result.library, "error": result.error,
                               "seconds": result.seconds}))
    os.replace(tmp, work / "result.json")  # written last: its presence means the build is complete


def build_extension(spec: ExtensionSpec, root: str | None = None, timeout_s: float = 300.0) -> BuildResult:
    """Build ``spec`` under ``root`` (default :func:`default_build_root`), or return the cached result.

    Concurrent builds of the same spec wait for each other (a file lock per key) and build once.
    """
    tc = toolchain()
    if tc.nvcc is None:
        return BuildResult("toolchain_missing", spec.key(), error="nvcc not found (set CUDA_HOME or put nvcc on PATH)")
    key = hashlib.sha256(f"{spec.key()}|{tc.fingerprint}".encode()).hexdigest()[:24]
    base = Path(root or default_build_root())
    objects = base / "objects"
    objects.mkdir(parents=True, exist_ok=True)
    work = base / key
    with open(base / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = work / "result.json"
        if done.exists():
            data = json.loads(done.read_text())
            if data["status"] != "ok" or (data["library"] and os.path.exists(data["library"])):
                return BuildResult(data["status"], key, library=data["library"], error=data["error"],
                                   seconds=float(data["seconds"]), cached=True)
        if work.exists():  # a half-finished build (killed evaluator) or a library removed by hand
            shutil.rmtree(work, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=base))
        try:
            staged = staging / key
            staged.mkdir()
            result = _build(spec, tc, staged, objects, timeout_s)
            if result.status == "timeout":
                return result  # not cached: a loaded machine may finish it next time
            os.replace(staged, work)
            if result.ok:
                result.library = str(work / f"{spec.name}.so")
            _write_result(work, result)
            return result
        finally:
            shutil.rmtree(staging, ignore_errors=True)

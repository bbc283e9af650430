"""What runs inside one forked evaluation child: the reference role or the candidate role.

The child reports raw facts through its :class:`~forge_kernels.eval.channel.ChannelWriter`
(outputs as raw tensors, launch counts, aten ops seen, raw timing samples, errors with their stage)
and decides nothing: verdicts are formed by the evaluator. The reference role never loads
candidate code; the candidate role never sees reference outputs.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import importlib.util
import linecache
import os
import sys
import tempfile
import threading
import time
import traceback
import types
from collections.abc import Iterator
from typing import Any

import torch

from forge_kernels.eval.channel import DTYPES, ChannelWriter
from forge_kernels.tasks.source_check import apply_shape_overrides
from forge_kernels.eval.launches import AtenAudit, LaunchCounter
from forge_kernels.eval.request import ChildRequest
from forge_kernels.eval.isolation.audit import apply_limits, install_audit_hook
from forge_kernels.eval.isolation.cgroups import EvalCgroup
from forge_kernels.eval.isolation.jail import enter_jail, jail_spec
from forge_kernels.eval.timing import (
    TimingPrimitives,
    l2_flush_buffer,
    l2_persisting_limit,
    reset_persisting_l2,
    time_calls,
)

__all__ = ["run_child"]

_MODES = (("eval", False), ("eval", True), ("train", False), ("train", True))
_TO = torch.Tensor.to
_DETACH = torch.Tensor.detach
_CONTIGUOUS = torch.Tensor.contiguous
_CLONE = torch.Tensor.clone
_COPY = torch.Tensor.copy_
_VIEW = torch.Tensor.view
_NUMPY = torch.Tensor.numpy
_STORAGE_PTR = lambda t: t.untyped_storage().data_ptr()  # noqa: E731


_STAGE_SUFFIX = {"primary": "", "alternate": "_alt", "signed": "_signed"}


def _torch_state() -> dict[str, Any]:
    """Global PyTorch settings that change what the reference would compute (the reference ran in
    a clean process with the values :meth:`_Child.setup` sets); compared by the evaluator."""
    return {
        "allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "default_dtype": str(torch.get_default_dtype()).removeprefix("torch."),
        "reduced_precision_fp16": torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "reduced_precision_bf16": torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
    }


def _count_thread_starts() -> list[int]:
    """Count every Python thread started from now on, also through raw ``_thread`` (which neither
    threading's count nor, once it has ended, ``/proc/self/task`` shows): the starters in
    ``_thread`` and threading's private aliases of them are wrapped. Returns the live counter."""
    import _thread

    count = [0]
    for module in (_thread, threading):
        for name in ("start_new_thread", "start_joinable_thread", "_start_new_thread", "_start_joinable_thread",
                     "start_new"):
            original = getattr(module, name, None)
            if original is None or getattr(original, "_fk_counted", False):
                continue

            def counted(*args: Any, __original: Any = original, **kwargs: Any) -> Any:
                count[0] += 1
                return __original(*args, **kwargs)

            counted._fk_counted = True  # type: ignore[attr-defined]
            setattr(module, name, counted)
    return count


def _os_threads() -> int:
    """Threads of this process, from the kernel (``/proc/self/task``)."""
    return len(os.listdir("/proc/self/task"))


def _poison_uninitialized(on: bool) -> None:
    """Fill fresh ``torch.empty`` memory with NaN (integers: their maximum) while ``on``."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.use_deterministic_algorithms(on, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = on  # type: ignore[attr-defined]


class _Abort(Exception):
    """Stop the child after an error frame was sent."""


def run_child(wire: dict[str, Any], fd: int, cgroup: EvalCgroup | None = None) -> None:
    """Entry point in the forked child (``wire``: a :class:`ChildRequest` as JSON); never returns."""
    out = ChannelWriter(fd)
    code = 0
    request = None
    try:
        request = ChildRequest.from_wire(wire)
        _Child(request, out, cgroup).run()
        out.send({"kind": "done"})
        os.close(fd)  # EOF now: the evaluator need not wait for the (slow, on a GPU) process teardown
    except _Abort:
        pass
    except BaseException as err:  # a harness bug: reported as internal, never blamed on the candidate
        _send_error(out, "harness", err, request.candidate_path if request else "", {})
        code = 3
    finally:
        os._exit(code)


def _send_error(out: ChannelWriter, stage: str, err: BaseException, candidate_path: str,
                kernels: dict[str, list[int]]) -> None:
    frames = list(traceback.walk_tb(err.__traceback__))
    in_kernel = type(err).__name__ == "InterpreterError" or any(
        f.f_code.co_filename == candidate_path and any(a <= line <= b for a, b in kernels.values())
        for f, line in frames
    )
    summary = traceback.extract_tb(err.__traceback__)
    mine = [fs for fs in summary if fs.filename == candidate_path] or summary[-3:]
    trace = "".join(traceback.format_list(mine)) + "".join(traceback.format_exception_only(type(err), err))
    out.send({
        "kind": "error", "stage": stage, "type": type(err).__name__, "module": type(err).__module__ or "",
        "message": str(err)[:4000], "trace": trace[-8000:], "in_kernel": bool(in_kernel),
    })


def _load_task(source: str, name: str, overrides: dict[str, Any]) -> types.ModuleType:
    """The task module, compiled from the request's source text with the shape overrides written
    into it (so constants derived from them, ``bias_shape = (out_features,)``, follow). Never read
    from a file: the candidate can write its temp dir."""
    origin = f"<task {name}>"
    text = apply_shape_overrides(source, overrides, origin)
    module = types.ModuleType(name)
    module.__file__ = origin
    sys.modules[name] = module
    linecache.cache[origin] = (len(text), None, text.splitlines(keepends=True), origin)  # tracebacks, inspect
    exec(compile(text, origin, "exec"), vars(module))  # noqa: S102 - the trusted task source
    return module


class _Child:
    def __init__(self, request: ChildRequest, out: ChannelWriter, cgroup: EvalCgroup | None = None) -> None:
        self.req = request
        self.out = out
        self.cgroup = cgroup
        self.read_only_in_tmp: list[str] = []  # the jail's read-only binds inside its /tmp
        self.role: str = request.role
        self.device = torch.device("cpu")
        self.kernels = request.kernels
        self.candidate_path = request.candidate_path
        self.expected = request.expected
        self.timing_lock_fd: int | None = None

    # -- plumbing --------------------------------------------------------------------------------
    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        try:
            yield
        except _Abort:
            raise
        except BaseException as err:
            _send_error(self.out, name, err, self.candidate_path, self.kernels)
            raise _Abort from None

    @contextlib.contextmanager
    def device_timing(self) -> Iterator[None]:
        """Hold the device's timing lock (if the evaluator gave one): one timed kernel per GPU at a
        time. ``flock`` dies with the process, so a killed child never leaves the lock held."""
        if self.timing_lock_fd is None:
            yield
            return
        fcntl.flock(self.timing_lock_fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self.timing_lock_fd, fcntl.LOCK_UN)

    def note(self, message: str) -> None:
        self.out.send({"kind": "note", "message": message})

    def phase(self, name: str) -> None:
        """Mark the end of a phase (diagnostic wall-clock breakdown; CLOCK_MONOTONIC is system-wide)."""
        self.out.send({"kind": "phase", "name": name, "t": time.monotonic()})

    def setup(self) -> None:
        cuda = self.req.device == "cuda"
        if cuda and self.req.timing_lock:  # opened before the jail hides the file
            self.timing_lock_fd = os.open(self.req.timing_lock, os.O_RDONLY)
        if self.req.isolation == "os":
            libraries = list(self.req.cuda_libraries.values())
            spec = jail_spec(self.req.device, extra_read_only=[os.path.dirname(p) for p in libraries],
                             tmp_mb=self.req.tmp_size_mb, max_procs=self.req.max_processes)
            self.read_only_in_tmp = [p for p in spec.read_only if p.startswith("/tmp/")]
            for note in enter_jail(spec, self.cgroup) + [self.req.cgroup_note]:
                if note:
                    self.note(note)
            tmp = "/tmp"
        else:
            tmp = self.req.tmp_dir
            self.note("isolation: audit hook only (not a security boundary)")
        os.chdir(tmp)
        os.environ["TMPDIR"] = tmp
        os.environ["TRITON_CACHE_DIR"] = os.path.join(tmp, ".triton")  # private: no cache shared across evaluations
        tempfile.tempdir = tmp  # the zygote cached gettempdir() as /tmp before the fork
        self.tmp = tmp
        if self.role == "candidate":
            self.candidate_path = self.req.candidate_path = os.path.join(tmp, "candidate.py")
            with open(self.candidate_path, "w") as f:
                f.write(self.req.candidate_source)
        apply_limits(self.req.host_memory_mb, address_space=self.req.address_space_limit and not cuda)
        if cuda:
            torch.cuda.set_device(self.req.device_index)
            self.device = torch.device("cuda", self.req.device_index)
            self.out.send({"kind": "device", "name": torch.cuda.get_device_name(self.device)})
            # the driver's own default limit (nonzero on H100), read before candidate code runs
            self.l2_baseline = l2_persisting_limit()
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        torch.set_default_dtype(torch.float32)
        self.torch_state = _torch_state()

    # -- inputs and outputs ------------------------------------------------------------------------
    def make_inputs(self, module: types.ModuleType, seed: int, reuse: list[Any] | None,
                    signed: bool = False) -> list[Any]:
        """The task's inputs for ``seed``. ``signed``: every floating input gets random signs (the
        evaluator's own draw: a kernel that is the identity on the task's all-positive inputs, say
        ``x.clone()`` for ReLU of ``torch.rand``, fails it)."""
        with self.stage("task"):
            torch.manual_seed(seed)
            fresh = [x.to(self.device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
            if signed:
                gen = torch.Generator().manual_seed(seed)
                fresh = [x * (torch.randint(0, 2, x.shape, generator=gen) * 2 - 1).to(x.device, x.dtype)
                         if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in fresh]
        if reuse is None or len(reuse) != len(fresh):
            return fresh
        # Same tensors, new contents: defeats caches keyed on identity, pointer or shape.
        merged = []
        for old, new in zip(reuse, fresh):
            same = isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor) and old.shape == new.shape \
                and old.dtype == new.dtype
            merged.append(_COPY(old, new) if same else new)
        return merged

    def send_tensor(self, header: dict[str, Any], tensor: torch.Tensor) -> None:
        t = _CONTIGUOUS(_TO(_DETACH(tensor), "cpu"))
        raw = _NUMPY(_VIEW(_VIEW(t, -1), torch.uint8)) if t.numel() else b""
        dtype = str(t.dtype).removeprefix("torch.")
        self.out.send({**header, "kind": "tensor", "dtype": dtype, "shape": list(t.shape), "nbytes": t.numel() *
                       t.element_size()}, memoryview(raw) if t.numel() else b"")

    def send_outputs(self, result: Any, shapes: str, trial: int, inputs: list[Any]) -> None:
        outputs = list(result) if isinstance(result, (tuple, list)) else [result]
        expected = self.expected.get(shapes, [])
        input_ptrs = {_STORAGE_PTR(x) for x in inputs if type(x) is torch.Tensor and x.numel()}
        for i, o in enumerate(outputs):
            meta: dict[str, Any] = {"kind": "output", "shapes": shapes, "trial": trial, "index": i,
                                    "count": len(outputs), "type": type(o).__qualname__}
            if type(o) is not torch.Tensor:  # subclasses and non-tensors are not unwrapped here
                meta["plain_tensor"] = False
                self.out.send(meta)
                continue
            dtype = str(o.dtype).removeprefix("torch.")
            meta.update(plain_tensor=True, dtype=dtype, shape=list(o.shape), layout=str(o.layout),
                        device=str(o.device), aliases_input=bool(o.numel() and _STORAGE_PTR(o) in input_ptrs))
            self.out.send(meta)
            want = expected[i] if i < len(expected) else None
            sendable = self.role == "reference" or (
                want is not None and want == [dtype, list(o.shape)] and o.layout == torch.strided
                and dtype in DTYPES
            )
            if sendable:
                self.send_tensor({"tag": "output", "shapes": shapes, "trial": trial, "index": i}, o)

    # -- roles ---------------------------------------------------------------------------------------
    def run(self) -> None:
        self.setup()
        self.phase("setup")
        self._modules: dict[bool, types.ModuleType] = {}
        for alternate in (False, True):  # both shape sets, before any candidate code runs
            if not alternate or self.req.alt_overrides is not None:
                self._modules[alternate] = self._load(alternate)
        if self.role == "reference":
            self.run_reference()
        else:
            self.run_candidate()

    def _load(self, alternate: bool) -> types.ModuleType:
        with self.stage("task"):
            overrides = self.req.alt_overrides if alternate else self.req.overrides
            return _load_task(self.req.task_source, f"task_module{'_alt' if alternate else ''}", overrides or {})

    def _task(self, alternate: bool) -> types.ModuleType:
        return self._modules[alternate]

    def _shape_sets(self) -> list[tuple[str, bool, list[int]]]:
        """(name, uses the alternate shapes, seeds) per shape set; ``signed`` uses sign-flipped inputs."""
        seed = self.req.seed
        sets = [("primary", False, [seed + k for k in range(self.req.trials)])]
        if self.req.alt_overrides is not None and self.req.alt_trials:
            sets.append(("alternate", True, [seed + 1000 + k for k in range(self.req.alt_trials)]))
        if self.req.signed_trial:
            sets.append(("signed", False, [seed + 2000]))
        return sets

    def run_reference(self) -> None:
        for shapes, alternate, seeds in self._shape_sets():
            task = self._task(alternate)
            with self.stage("task"):
                torch.manual_seed(self.req.seed)
                model = task.Model(*task.get_init_inputs()).to(self.device).eval()
            for trial, seed in enumerate(seeds):
                inputs = self.make_inputs(task, seed, None, signed=shapes == "signed")
                clones = [_CLONE(x) if isinstance(x, torch.Tensor) else x for x in inputs]
                with self.stage("task"), torch.no_grad():
                    result = model(*clones)
                self.send_outputs(result, shapes, trial, inputs)
                if shapes == "primary" and trial == 0:
                    for i, x in enumerate(inputs):
                        if isinstance(x, torch.Tensor):
                            self.send_tensor({"tag": "input", "index": i}, x)
                    dtypes = sorted({str(x.dtype).removeprefix("torch.") for x in inputs
                                     if isinstance(x, torch.Tensor) and x.is_floating_point()})
                    self.out.send({"kind": "input_dtypes", "dtypes": dtypes})
                    if dtypes == ["float32"]:
                        self._float64_reference(model, inputs)
            if shapes == "primary" and self.device.type == "cuda" and self.req.timing:
                with self.device_timing():
                    self.time_reference(task, model)

    def _float64_reference(self, model: torch.nn.Module, inputs: list[Any]) -> None:
        """Trial 0 of an fp32 task once more in float64: the yardstick of accuracy (a kernel far
        less accurate than the fp32 reference computes in lower precision)."""
        try:
            wide = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
            with torch.no_grad():
                result = copy.deepcopy(model).double()(*wide)
        except Exception as err:  # noqa: BLE001 - a task without a float64 path: no accuracy check
            self.note(f"no float64 reference: {type(err).__name__}: {str(err)[:200]}")
            return
        for i, o in enumerate(list(result) if isinstance(result, (tuple, list)) else [result]):
            if type(o) is torch.Tensor and o.dtype == torch.float64:
                self.send_tensor({"tag": "float64", "index": i}, o)

    def time_reference(self, task: types.ModuleType, model: torch.nn.Module) -> None:
        prims = TimingPrimitives.capture()
        flush = l2_flush_buffer(self.device)
        inputs = self.make_inputs(task, self.req.seed, None)
        with self.stage("task"), torch.no_grad():
            samples = time_calls(lambda: model(*inputs), prims, self.req.warmup, self.req.repeats, flush)
        self.out.send({"kind": "timing", "name": "eager", "samples": samples})
        if self.req.compile_baseline:
            try:
                compiled = torch.compile(model)
                with torch.no_grad():
                    samples = time_calls(lambda: compiled(*inputs), prims, max(self.req.warmup, 3),
                                         self.req.repeats, flush)
                self.out.send({"kind": "timing", "name": "compiled", "samples": samples})
            except Exception as err:  # a compile failure of the reference is not fatal
                self.note(f"torch.compile baseline unavailable: {type(err).__name__}: {str(err)[:300]}")

    def run_candidate(self) -> None:
        prims = TimingPrimitives.capture()
        cuda_candidate = self.req.language == "cuda"
        if cuda_candidate:  # CUDA C++ via load_inline: prebuilt libraries, launches seen by the profiler
            from forge_kernels.eval.cuda.child import ProfilerLaunchCounter, install_prebuilt_loader

            install_prebuilt_loader(self.req.cuda_libraries)
            counter: Any = ProfilerLaunchCounter(self.req.cuda_kernels)
        else:
            counter = LaunchCounter()
        counter.install()
        threads_before = threading.active_count()
        torch.ones(1 << 17).add_(1)  # start torch's own intra-op threads now: later OS threads are the candidate's
        self.os_threads_before = _os_threads()
        self.thread_starts = _count_thread_starts()
        primary_task = self._task(False)
        install_audit_hook([self.tmp, "/dev/shm"], self.candidate_path, self._report_violation,
                           read_only=self.read_only_in_tmp)
        with self.stage("import"):
            spec = importlib.util.spec_from_file_location("candidate", self.candidate_path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules["candidate"] = module
            spec.loader.exec_module(module)
        self.out.send({"kind": "progress", "stage": "imported"})
        self.phase("import")
        model_cls = getattr(module, "ModelNew", None)
        if not (isinstance(model_cls, type) and issubclass(model_cls, torch.nn.Module)):
            self.out.send({"kind": "error", "stage": "import", "type": "MissingModelNew", "module": "",
                           "message": f"the candidate module defines no nn.Module subclass named ModelNew "
                                      f"(found {type(model_cls).__name__})", "trace": "", "in_kernel": False})
            raise _Abort
        launches: dict[str, Any] = {"trials": [], "repeats": [], "modes": {}}
        audit_ops = AtenAudit(counter, set())  # the task's dtypes are filled in from the first inputs
        last_model, last_inputs = None, []
        _poison_uninitialized(True)  # torch.empty & co. return NaN: an output the kernel never wrote shows
        for shapes, alternate, seeds in self._shape_sets():
            task = primary_task if not alternate else self._task(True)
            suffix = _STAGE_SUFFIX[shapes]
            with self.stage("init" + suffix):
                init_inputs = task.get_init_inputs()
                torch.manual_seed(self.req.seed)
                model = model_cls(*init_inputs).to(self.device).eval()
            inputs: list[Any] | None = None
            for trial, seed in enumerate(seeds):
                inputs = self.make_inputs(task, seed, inputs if trial % 2 == 1 else None, signed=shapes == "signed")
                if not audit_ops.task_dtypes:
                    audit_ops.task_dtypes = {x.dtype for x in inputs if isinstance(x, torch.Tensor)
                                             and x.is_floating_point()}
                counter.take()
                with self.stage("forward" + suffix), torch.no_grad(), audit_ops:  # every checked call is audited
                    result = model(*inputs)
                if shapes == "primary":
                    launches["trials"].append(counter.take())
                    if trial == 0:
                        self.out.send({"kind": "progress", "stage": "ran"})
                        self.phase("first_forward")
                self.send_outputs(result, shapes, trial, inputs)
                if shapes == "primary" and trial == 0:
                    for i, x in enumerate(inputs):
                        if type(x) is torch.Tensor:
                            self.send_tensor({"tag": "input", "index": i}, x)
                del result
            if shapes == "primary":
                last_model, last_inputs = model, inputs or []
                with audit_ops:
                    self._launch_audit(model, last_inputs, counter, launches)
        _poison_uninitialized(False)
        self.out.send({"kind": "launches", **launches})
        self.out.send({"kind": "aten", "compute_ops": audit_ops.compute_ops, "downcasts": audit_ops.downcasts})
        self._integrity(prims, counter, threads_before)
        self.out.send({"kind": "torch_state", **_torch_state()})
        if cuda_candidate:
            counter.stop()  # one profiler session at a time: timing and profiling come next
        self.phase("correctness")
        if self.device.type == "cuda" and last_model is not None:
            with self.device_timing():
                self._device_measurements(last_model, primary_task, prims, counter)

    def _launch_audit(self, model: torch.nn.Module, inputs: list[Any], counter: Any,
                      launches: dict[str, Any]) -> None:
        """Launches on repeated identical calls (caches) and in each train/eval x grad mode (decoys)."""
        with self.stage("forward"), torch.no_grad():
            for _ in range(2):
                counter.take()
                model(*inputs)
                launches["repeats"].append(counter.take())
        for mode, grad in _MODES:
            model.train(mode == "train")
            counter.take()
            try:
                with torch.set_grad_enabled(grad):
                    model(*inputs)
                launches["modes"][f"{mode}_{'grad' if grad else 'nograd'}"] = counter.take()
            except Exception as err:
                self.note(f"forward in {mode} mode with grad={grad} raised {type(err).__name__}: {str(err)[:200]}")
        model.eval()

    def _integrity(self, prims: TimingPrimitives, counter: Any, threads_before: int) -> None:
        checks: dict[str, Any] = {
            "threads_started": max(threading.active_count() - threads_before, self.thread_starts[0]),
            # raw _thread threads and threads started from C++ do not show in threading's count
            "os_threads_started": None if self.req.language == "cuda" else _os_threads() - self.os_threads_before,
            "timer_patched": prims.still_installed(),
            "launch_wrapper_intact": counter.intact(),
            "streams": sorted(counter.streams),
        }
        if self.device.type == "cuda":
            checks["default_stream"] = torch.cuda.current_stream().cuda_stream
            checks["l2_persisting_limit"] = l2_persisting_limit()
            checks["l2_persisting_baseline"] = getattr(self, "l2_baseline", None)
        self.out.send({"kind": "checks", **checks})

    def _device_measurements(self, model: torch.nn.Module, task: types.ModuleType, prims: TimingPrimitives,
                             counter: Any) -> None:
        from forge_kernels.eval.profiling import profile_kernels

        inputs = self.make_inputs(task, self.req.seed, None)
        with self.stage("forward"), torch.no_grad():
            if self.req.profile:
                kernels = profile_kernels(lambda: model(*inputs))
                self.out.send({"kind": "profile", "kernels": kernels})
                self.phase("profile")
            if self.req.timing:
                if not reset_persisting_l2():
                    self.note("persisting-L2 reset unavailable (no CUDA runtime library reachable)")
                flush = l2_flush_buffer(self.device)
                counter.take()
                samples = time_calls(lambda: model(*inputs), prims, self.req.warmup, self.req.repeats, flush)
                self.out.send({"kind": "timing", "name": "candidate", "samples": samples,
                               "launches": counter.take() if isinstance(counter, LaunchCounter) else None})
                self.phase("timing")

    def _report_violation(self, kind: str, message: str) -> None:
        self.out.send({"kind": "violation", "what": kind, "message": message})

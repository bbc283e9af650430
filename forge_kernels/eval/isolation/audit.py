"""The second line of defence in the child: resource limits and an irremovable audit hook.

The boundary is the jail (:mod:`forge_kernels.eval.isolation.jail`); this hook only names what a
candidate tried, in its error text, and adds checks the OS has no notion of (class-attribute
patches of timers, imports of forbidden modules). Installed before candidate code is imported, the
hook (:func:`sys.addaudithook` cannot be undone) denies network sockets, process creation, signals to
other processes, foreign-library loading and writes outside the private temp dir, and it reports
every denial through the result channel at once, so a candidate that catches the exception is
still caught. Process creation and library loading are denied only when the nearest non-stdlib
caller is candidate code: Triton itself runs ``ptxas`` and loads its launcher on a GPU.
"""

from __future__ import annotations

import os
import resource
import sys
import sysconfig
from collections.abc import Callable

__all__ = ["SandboxViolation", "apply_limits", "install_audit_hook"]

_STDLIB = (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"], "<frozen")
_CALLER_CHECKED = frozenset(
    {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
     "pty.spawn", "ctypes.dlopen", "ctypes.dlsym", "ctypes.call_function", "import", "object.__setattr__",
     "object.__delattr__"}
)
_ALWAYS_DENIED = frozenset(
    {"socket.__new__", "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
     "socket.gethostbyname", "urllib.Request", "webbrowser.open", "sys.unraisablehook", "sys.excepthook"}
)
_FILE_EVENTS = frozenset(
    {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.symlink", "os.link",
     "os.truncate", "os.utime", "shutil.rmtree", "shutil.copyfile", "shutil.move", "os.chdir"}
)
_SIGNAL_EVENTS = frozenset({"os.kill", "os.killpg", "signal.pthread_kill"})
_FORBIDDEN_IMPORTS = frozenset(
    {"ctypes", "_ctypes", "cffi", "socket", "_socket", "subprocess", "_posixsubprocess", "multiprocessing",
     "urllib.request", "http.client", "requests", "httpx", "pty", "gc", "signal"}
)
_TIMER_NAMES = frozenset({"perf_counter", "perf_counter_ns", "time", "monotonic", "Event", "elapsed_time",
                          "synchronize", "record", "do_bench"})
_PROTECTED = ("torch", "triton", "time", "forge_kernels", "builtins", "threading")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


class SandboxViolation(PermissionError):
    """Candidate code tried something the sandbox forbids."""


def apply_limits(host_memory_mb: int, address_space: bool) -> None:
    """No core dumps; bound the address space (CPU only: CUDA reserves huge virtual ranges, so on a
    GPU the evaluator watches resident memory instead)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if address_space:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[0])
        current = pages * os.sysconf("SC_PAGE_SIZE")
        limit = current + host_memory_mb * (1 << 20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _nearest_caller_file() -> str:
    frame = sys._getframe(2)
    here = __file__
    while frame is not None:
        name = frame.f_code.co_filename
        if name != here and not name.startswith(_STDLIB):
            return name
        frame = frame.f_back
    return ""


def install_audit_hook(
    allowed_write_dirs: list[str],
    candidate_file: str,
    report: Callable[[str, str], None],
    read_only: list[str] | None = None,
) -> None:
    """Install the hook. ``report(kind, message)`` is called on each denial (kind ``sandbox`` or
    ``timer_patch``) before the :class:`SandboxViolation` is raised into the caller. ``read_only``:
    paths inside the writable dirs that are not writable (the jail's read-only binds under /tmp)."""
    allowed = tuple(os.path.realpath(d) + os.sep for d in allowed_write_dirs) + ("/dev/null",)
    fixed = tuple(os.path.realpath(d) + os.sep for d in read_only or [])
    own_pid = os.getpid()
    busy = [False]

    def deny(kind: str, message: str) -> None:
        report(kind, message)
        raise SandboxViolation(f"sandbox: {message}")

    def path_allowed(path: object) -> bool:
        if isinstance(path, int):
            return True
        try:
            real = os.path.realpath(os.fsdecode(path))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
        return real == "/dev/null" or ((real + os.sep).startswith(allowed) and not (real + os.sep).startswith(fixed))

    def hook(event: str, args: tuple) -> None:
        if busy[0]:
            return
        if event not in _ALWAYS_DENIED and event not in _CALLER_CHECKED and event not in _FILE_EVENTS \
                and event not in _SIGNAL_EVENTS and event != "open":
            return
        busy[0] = True
        try:
            _check(event, args)
        finally:
            busy[0] = False

    def _check(event: str, args: tuple) -> None:
        if event in _ALWAYS_DENIED:
            deny("sandbox", f"{event} is not allowed (no network)")
        elif event == "open":
            path, mode, flags = args
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS
            )
            if writing and not path_allowed(path):
                deny("sandbox", f"write to {path!r} outside the private temp dir")
        elif event in _FILE_EVENTS:
            if event == "os.chdir" or not all(path_allowed(a) for a in args[:2] if isinstance(a, (str, bytes))):
                deny("sandbox", f"{event}{args!r} outside the private temp dir")
        elif event in _SIGNAL_EVENTS:
            if args and args[0] not in (own_pid, 0) and event != "signal.pthread_kill":
                deny("sandbox", f"{event} to pid {args[0]} (only the own process may be signalled)")
        elif event in ("object.__setattr__", "object.__delattr__"):
            target = args[0]
            module = getattr(target, "__module__", "") or ""
            direct = sys._getframe(2).f_code.co_filename  # the frame doing the assignment
            if direct == candidate_file and isinstance(target, type) and module.startswith(_PROTECTED):
                kind = "timer_patch" if args[1] in _TIMER_NAMES else "sandbox"
                deny(kind, f"patches {module}.{target.__name__}.{args[1]}")
        elif event == "import":
            frame = sys._getframe(2)
            while frame is not None and frame.f_code.co_filename.startswith("<frozen"):
                frame = frame.f_back  # importlib's own frames
            importer = frame.f_code.co_filename if frame is not None else ""
            if importer == candidate_file and str(args[0]).split(".")[0] in _FORBIDDEN_IMPORTS:
                deny("sandbox", f"import of {args[0]}")
        elif _nearest_caller_file() == candidate_file:
            deny("sandbox", f"{event} from candidate code")

    sys.addaudithook(hook)

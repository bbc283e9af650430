"""The warm zygote: a process with torch and triton imported (CUDA never initialised) that forks
one child per evaluation, and the client the evaluator uses to drive it.

Protocol (one ``SOCK_SEQPACKET`` socket pair, one JSON message per packet):

* evaluator -> zygote: ``{"id": n, "request": {...}}`` with the write end of a fresh pipe attached
  (``SCM_RIGHTS``); the forked child inherits it as its result channel.
* zygote -> evaluator: ``{"ready": pid, "jail": null | why-not}`` once, ``{"started": n, "pid": p}``
  per fork and ``{"exited": p, "code": c, "signal": s, "oom": bool, "process_limit": bool}`` when
  a child is reaped.

Each child gets its own process group and, where the cgroup filesystem is writable, its own cgroup
(memory and process count for its whole tree), created here before the fork and removed after the
reap. The child then jails itself (:mod:`forge_kernels.eval.isolation.jail`) before it runs
anything untrusted. Nothing a child does reaches the zygote's memory; if the zygote dies anyway,
the client notices (EOF) and :meth:`ZygoteClient.ensure_running` starts a new one.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from concurrent.futures import Future
from typing import Any

from forge_kernels.eval.isolation import cgroups

__all__ = ["ZygoteClient", "ZygoteDied", "ChildExit"]

_MAX_MESSAGE = 1 << 22


class ZygoteDied(RuntimeError):
    """The zygote process went away (killed, crashed) while a request depended on it."""


class ChildExit:
    """How a child ended: an exit code, or the signal that killed it, and what its cgroup saw."""

    __slots__ = ("code", "signal", "oom", "process_limit")

    def __init__(self, code: int | None, sig: int | None, oom: bool = False, process_limit: bool = False) -> None:
        self.code = code
        self.signal = sig
        self.oom = oom  # the kernel killed a process of its tree for exceeding the memory limit
        self.process_limit = process_limit  # a fork of its tree was refused at the process limit

    def __repr__(self) -> str:
        return f"ChildExit(code={self.code}, signal={self.signal}, oom={self.oom}, process_limit={self.process_limit})"


# ---------------------------------------------------------------------------------------------
# zygote side
# ---------------------------------------------------------------------------------------------

def _warm_triton_driver() -> None:
    """Do Triton's per-process start-up once, here, instead of in every child: finding libcuda
    (``ldconfig -p``), loading the cached ``cuda_utils`` extension and hashing Triton itself for
    cache keys. This dlopens libcuda but never calls ``cuInit``, so forked children can still
    create their own CUDA context."""
    try:
        from triton.runtime import driver

        driver.active.utils  # noqa: B018  (attribute access instantiates the lazy driver)
        try:
            from triton.runtime.cache import triton_key  # triton >= 3.3
        except ImportError:
            from triton.compiler.compiler import triton_key
        triton_key()  # hashes Triton's own sources and library (in every kernel's cache key); lru-cached
        from forge_kernels.eval.warmup import warm_compiler

        warm_compiler()
    except Exception as err:  # an optimisation only: children then do this work themselves
        print(f"zygote: Triton warm-up skipped: {type(err).__name__}: {err}", file=sys.stderr)


def _zygote_main(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    import torch  # noqa: F401  (warm imports: this is what the zygote is for)
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    import torch._dynamo  # noqa: F401  (dispatch modes and torch.compile import it lazily: ~2 s)
    import torch.profiler  # noqa: F401
    import triton.runtime.interpreter  # noqa: F401

    from forge_kernels.eval import harness, profiling  # noqa: F401  (and everything they import)

    if os.environ.get("TRITON_INTERPRET") != "1":
        import torch._inductor.compile_fx  # noqa: F401  (the torch.compile baseline of the reference)

        _warm_triton_driver()
    if threading.active_count() != 1:
        raise RuntimeError("zygote must stay single-threaded before forking")
    if torch.cuda.is_initialized():
        raise RuntimeError("a warm import initialised CUDA in the zygote; forked children could not use the GPU")

    sys.dont_write_bytecode = True
    cgroups.sweep()  # what zygotes killed before us left behind
    from forge_kernels.eval.isolation.jail import jail_available

    sock.send(json.dumps({"ready": os.getpid(), "jail": jail_available()}).encode())
    while True:
        readable, _, _ = select.select([sock], [], [], 0.02)
        _reap(sock)
        if not readable:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, 4)
        except OSError:
            data, fds = b"", []
        if not data:  # evaluator gone: take the children down with us
            _kill_children()
            os._exit(0)
        message = json.loads(data)
        request = message["request"]
        group, note = cgroups.create(f"forge-eval-{os.getpid()}-{message['id']}",
                                     int(request["host_memory_mb"]) << 20, int(request["max_processes"]))
        request["cgroup_note"] = note
        pid = os.fork()
        if pid == 0:
            _child(sock, request, fds[0], group)
        for f in fds:
            os.close(f)
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass  # the child already did it (or already exited)
        _children[pid] = group
        sock.send(json.dumps({"started": message["id"], "pid": pid}).encode())


_children: dict[int, cgroups.EvalCgroup | None] = {}
_unremoved: list[cgroups.EvalCgroup] = []  # cgroups whose processes were still dying at the reap


def _child(sock: socket.socket, request: dict[str, Any], fd: int, group: cgroups.EvalCgroup | None) -> None:
    try:
        os.setpgid(0, 0)
        sock.close()
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.close(devnull)
        from forge_kernels.eval.harness import run_child

        run_child(request, fd, group)
    finally:
        os._exit(4)


def _reap(sock: socket.socket) -> None:
    while _children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            _children.clear()
            return
        if pid == 0:
            return
        group = _children.pop(pid, None)
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        oom = limit = False
        if group is not None:
            oom, limit = group.oom_killed(), group.hit_process_limit()
            if not group.remove(wait_s=0.05):
                _unremoved.append(group)
        _unremoved[:] = [g for g in _unremoved if not g.remove()]
        try:
            sock.send(json.dumps({"exited": pid, "code": code, "signal": sig, "oom": oom,
                                  "process_limit": limit}).encode())
        except OSError:  # the evaluator closed while a finished child was being reaped: nothing to tell
            _kill_children()
            os._exit(0)


def _kill_children() -> None:
    for pid, group in list(_children.items()):
        with contextlib.suppress(OSError):  # already gone
            os.killpg(pid, signal.SIGKILL)
        if group is not None:
            group.kill()
    for pid, group in list(_children.items()):  # reap, then leave no cgroup behind
        with contextlib.suppress(ChildProcessError):  # reaped already
            os.waitpid(pid, 0)
        if group is not None:
            group.remove(wait_s=2.0)
    for group in _unremoved:
        group.remove(wait_s=2.0)


# ---------------------------------------------------------------------------------------------
# evaluator side
# ---------------------------------------------------------------------------------------------

class ZygoteClient:
    """Starts and drives one zygote; thread-safe, so several evaluations can run at once."""

    def __init__(self, env: dict[str, str], start_timeout_s: float = 180.0) -> None:
        self.env = env
        self.start_timeout_s = start_timeout_s
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._next_id = 0
        self._started: dict[int, Future[int]] = {}
        self._exits: dict[int, Future[ChildExit]] = {}
        self._forgotten: set[int] = set()  # pids whose exit message nobody will wait for
        self.generation = 0  # bumped on every (re)start
        self.jail_unavailable: str | None = None  # why the OS jail cannot be built here, if it cannot

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None and self._sock is not None

    def ensure_running(self) -> None:
        """Start the zygote if it is not running (first use, or after it died)."""
        with self._lock:
            if self.alive():
                return
            self._shutdown_locked()
            self._forgotten.clear()  # pids of the previous zygote's children
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            self._proc = subprocess.Popen(
                [sys.executable, "-c", "import sys; from forge_kernels.eval.zygote import _zygote_main;"
                 " _zygote_main(int(sys.argv[1]))", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], env=self.env, stdin=subprocess.DEVNULL,
            )
            theirs.close()
            ours.settimeout(self.start_timeout_s)
            try:
                ready = json.loads(ours.recv(_MAX_MESSAGE) or b"{}")
            except (OSError, ValueError) as err:
                self._proc.kill()
                raise ZygoteDied(f"zygote did not start: {err}") from err
            if "ready" not in ready:
                self._proc.kill()
                raise ZygoteDied(f"zygote did not start (exit code {self._proc.wait()})")
            self.jail_unavailable = ready.get("jail")
            ours.settimeout(None)
            self._sock = ours
            self.generation += 1
            threading.Thread(target=self._read_loop, args=(ours,), daemon=True, name="zygote-reader").start()

    def spawn(self, request: dict[str, Any], result_fd: int, timeout_s: float = 30.0) -> tuple[int, Future[ChildExit]]:
        """Fork a child running ``request`` with ``result_fd`` as its channel; returns its pid and a
        future that resolves when the zygote reaps it."""
        self.ensure_running()
        with self._lock:
            if self._sock is None:
                raise ZygoteDied("zygote is not running")
            self._next_id += 1
            rid = self._next_id
            started: Future[int] = Future()
            self._started[rid] = started
            try:
                socket.send_fds(self._sock, [json.dumps({"id": rid, "request": request}).encode()], [result_fd])
            except OSError as err:
                raise ZygoteDied(f"zygote is not accepting requests: {err}") from err
        pid = started.result(timeout=timeout_s)
        with self._lock:
            exit_future = self._exits.setdefault(pid, Future())
        return pid, exit_future

    def _read_loop(self, sock: socket.socket) -> None:
        while True:
            try:
                data = sock.recv(_MAX_MESSAGE)
            except OSError:
                data = b""
            if not data:
                break
            message = json.loads(data)
            with self._lock:
                if "started" in message:
                    self._started.pop(message["started"]).set_result(message["pid"])
                elif "exited" in message:
                    pid = message["exited"]
                    if pid in self._forgotten:  # nobody waits for it any more
                        self._forgotten.discard(pid)
                        continue
                    self._exits.setdefault(pid, Future()).set_result(ChildExit(
                        message["code"], message["signal"], bool(message.get("oom")),
                        bool(message.get("process_limit"))))
        with self._lock:  # zygote died: everything pending fails
            if self._sock is sock:
                self._sock = None
            for fut in list(self._started.values()) + [f for f in self._exits.values() if not f.done()]:
                if not fut.done():
                    fut.set_exception(ZygoteDied("zygote died"))
            self._started.clear()

    def forget(self, pid: int) -> None:
        """Drop the exit future of ``pid`` (reaped or not: its exit message is then ignored)."""
        with self._lock:
            fut = self._exits.pop(pid, None)
            if fut is None or not fut.done():
                self._forgotten.add(pid)

    def _shutdown_locked(self) -> None:
        if self._sock is not None:
            try:  # shutdown, not just close: the reader thread's recv pins the fd, so close alone sends no EOF
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()  # the zygote sees EOF, kills its children and exits
            self._sock = None
        if self._proc is not None:
            if self._proc.poll() is None:
                try:
                    self._proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
            cgroups.sweep(self._proc.pid)  # a zygote that died hard left its children's cgroups
        self._proc = None

    def close(self) -> None:
        """Stop the zygote (its children die with it)."""
        with self._lock:
            self._shutdown_locked()

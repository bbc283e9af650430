"""Run one request in a child forked from the zygote, under a deadline and a host-memory watch."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field

import psutil

from forge_kernels.eval.channel import Frame, parse_frames, verify_stream
from forge_kernels.eval.request import ChildRequest
from forge_kernels.eval.zygote import ChildExit, ZygoteClient, ZygoteDied

__all__ = ["ChildReport", "run_request", "run_fresh_process"]

_POLL_S = 0.02
_RSS_EVERY_S = 0.1


@dataclass
class ChildReport:
    """Everything observed about one child: its frames and how it ended."""

    frames: list[Frame] = field(default_factory=list)
    exit: ChildExit | None = None
    timed_out: bool = False
    memory_killed: bool = False
    peak_rss_mb: float = 0.0
    stream_error: str | None = None  # the byte stream was cut or malformed
    forged: str | None = None  # well-formed frames out of sequence, repeated, or after the end
    zygote_generation: int = 0
    started_at: float = 0.0  # time.monotonic() when the child was requested
    ended_at: float = 0.0  # ... and when its report was complete

    def phase_seconds(self) -> dict[str, float]:
        """Seconds per phase, from the child's phase marks (diagnostic only: the child could lie)."""
        phases: dict[str, float] = {}
        last = self.started_at
        for f in self.of_kind("phase"):
            t = f.header.get("t")
            if isinstance(t, (int, float)) and last <= t <= self.ended_at:
                phases[str(f.header.get("name"))[:32]] = round(t - last, 4)
                last = t
        if self.ended_at > last:
            phases["teardown"] = round(self.ended_at - last, 4)
        return phases

    def of_kind(self, kind: str) -> list[Frame]:
        return [f for f in self.frames if f.kind == kind]

    @property
    def finished(self) -> bool:
        return any(f.kind == "done" for f in self.frames)


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_request(zygote: ZygoteClient, request: ChildRequest, timeout_s: float, host_memory_mb: int) -> ChildReport:
    """Fork a child for ``request``, collect its channel until it exits, kill it at the deadline or
    when its resident memory exceeds ``host_memory_mb``. Raises :class:`ZygoteDied` if the zygote
    died under it (the caller retries on a fresh zygote)."""
    report = ChildReport(started_at=time.monotonic())
    read_fd, write_fd = os.pipe()
    try:
        pid, exit_future = zygote.spawn(request.to_wire(), write_fd)
    finally:
        os.close(write_fd)
    report.zygote_generation = zygote.generation
    buf = bytearray()
    deadline = time.monotonic() + timeout_s
    limit = host_memory_mb * (1 << 20)
    eof, complete, next_rss = False, False, 0.0
    try:
        proc: psutil.Process | None = psutil.Process(pid)
    except psutil.Error:
        proc = None
    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                report.timed_out = True
                break
            if exit_future.done() and eof:
                break
            if not eof:
                readable, _, _ = select.select([read_fd], [], [], min(_POLL_S, deadline - now))
                if readable:
                    chunk = os.read(read_fd, 1 << 20)
                    if chunk:
                        buf += chunk
                    else:
                        eof = True
                        complete = _ends_with_done(buf)
                        if complete:  # the report is whole: no need to wait for the CUDA teardown
                            break
                elif exit_future.done():
                    eof = _drain(read_fd, buf, grace_s=0.5)  # a grandchild may hold the pipe open
            else:
                try:
                    exit_future.result(timeout=min(_POLL_S, deadline - now))
                except FutureTimeout:
                    pass
            if proc is not None and now >= next_rss:
                next_rss = now + _RSS_EVERY_S
                rss = _tree_rss(proc, 2 if request.isolation == "os" else 0)
                if rss is None:
                    proc = None
                    continue
                report.peak_rss_mb = max(report.peak_rss_mb, rss / (1 << 20))
                if rss > limit:
                    report.memory_killed = True
                    break
    finally:
        _killpg(pid)  # always: also takes down anything the child spawned
        try:
            # A complete report makes the exit status moot; the zygote reaps the child later.
            report.exit = None if complete else exit_future.result(timeout=10)
        except ZygoteDied:
            os.close(read_fd)
            raise
        except FutureTimeout:
            report.exit = None
        if not complete:
            _drain(read_fd, buf, grace_s=0.2)
        os.close(read_fd)
        zygote.forget(pid)
    report.ended_at = time.monotonic()
    report.frames, report.stream_error = parse_frames(buf)
    report.forged = verify_stream(report.frames)
    return report


def _tree_rss(proc: psutil.Process, waiters: int) -> int | None:
    """Resident bytes of the evaluation's process tree below its ``waiters`` levels of waiting
    processes (the jail's outer child and init hold only the zygote's pages): the largest process
    whole, the others (forks) without the file pages they share. None once ``proc`` is gone. The
    cgroup, where there is one, is the hard bound; this watch is the fallback and the peak reported."""
    try:
        level = [proc]
        for _ in range(waiters):
            level = [c for p in level for c in p.children()]
        procs = level + [d for p in level for d in p.children(recursive=True)]
    except psutil.Error:
        return None
    sizes = []
    for p in procs:
        try:
            info = p.memory_info()
            sizes.append((info.rss, info.rss - info.shared))
        except psutil.Error:
            pass
    if not sizes:
        return 0 if proc.is_running() else None
    largest = max(sizes)
    return largest[0] + sum(private for rss, private in sizes) - largest[1]


def _ends_with_done(buf: bytearray) -> bool:
    """Whether the channel holds well-formed frames ending with the child's ``done`` frame."""
    frames, error = parse_frames(buf)
    return error is None and bool(frames) and frames[-1].kind == "done"


def _drain(fd: int, buf: bytearray, grace_s: float) -> bool:
    """Read what is left in the pipe; True when EOF was reached within ``grace_s``."""
    end = time.monotonic() + grace_s
    while time.monotonic() < end:
        readable, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
        if not readable:
            return False
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return True
        buf += chunk
    return False


def run_fresh_process(request: ChildRequest, env: dict[str, str], timeout_s: float) -> ChildReport:
    """Run ``request`` in a fresh Python process instead of a zygote fork (what KernelGym does).
    Used as the baseline of ``bench.eval_overhead``."""
    read_fd, write_fd = os.pipe()
    code = ("import json, sys; from forge_kernels.eval.harness import run_child; "
            "run_child(json.loads(sys.argv[1]), int(sys.argv[2]))")
    proc = subprocess.Popen([sys.executable, "-c", code, json.dumps(request.to_wire()), str(write_fd)], pass_fds=[write_fd],
                            env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    os.close(write_fd)
    buf = bytearray()
    report = ChildReport()
    deadline = time.monotonic() + timeout_s
    while not _drain(read_fd, buf, grace_s=max(0.0, min(1.0, deadline - time.monotonic()))):
        if time.monotonic() >= deadline:
            report.timed_out = True
            break
    _killpg(proc.pid)
    os.close(read_fd)
    report.frames, report.stream_error = parse_frames(buf)
    if not report.finished:  # like the zygote path: a complete report does not wait for the exit
        status = proc.wait()
        report.exit = ChildExit(status if status >= 0 else None, -status if status < 0 else None)
    threading.Thread(target=proc.wait, daemon=True).start()  # reap it
    return report

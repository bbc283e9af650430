"""One control group per evaluation: memory and process count bounded for the whole process tree
(forks included), and everything in it killed together at the end.

Created by the zygote (which must be allowed to write the cgroup filesystem: root, or a delegated
subtree), joined by the forked child before it drops privileges, removed when the zygote reaps it.
cgroup v1 (``memory`` + ``pids`` hierarchies) and v2 (one unified hierarchy) are both handled.
Where neither is writable, :func:`create` returns None with the reason, and the evaluation falls
back to per-process limits (``RLIMIT_NPROC`` in the evaluation's user namespace, the runner's
resident-memory watch over the process tree).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from pathlib import Path

__all__ = ["EvalCgroup", "create", "sweep"]

_NAME = re.compile(r"forge-eval-(\d+)-\d+$")

_ROOT = Path("/sys/fs/cgroup")


def _own_paths() -> dict[str, str]:
    """controller (or '' for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    paths: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            paths[c] = path
    return paths


class EvalCgroup:
    """The cgroup directories (one per v1 hierarchy, or one v2 directory) of one evaluation."""

    def __init__(self, dirs: dict[str, Path], unified: bool) -> None:
        self.dirs = dirs
        self.unified = unified

    def join(self, pid: int = 0) -> None:
        """Move ``pid`` (0: the calling process) into every directory."""
        for d in self.dirs.values():
            (d / "cgroup.procs").write_text(str(pid or os.getpid()))

    def _read(self, controller: str, name: str) -> str:
        try:
            return (self.dirs[controller] / name).read_text()
        except (OSError, KeyError):
            return ""

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process here for exceeding the memory limit."""
        text = self._read("memory", "memory.events" if self.unified else "memory.oom_control")
        return any(line.split()[0] == "oom_kill" and int(line.split()[1]) > 0 for line in text.splitlines()
                   if len(line.split()) == 2)

    def hit_process_limit(self) -> bool:
        """Whether a fork was refused because the process limit was reached."""
        text = self._read("pids", "pids.events")
        return any(line.split()[0] == "max" and int(line.split()[1]) > 0 for line in text.splitlines()
                   if len(line.split()) == 2)

    def kill(self) -> None:
        """SIGKILL everything still in the cgroup."""
        if self.unified and (self.dirs["memory"] / "cgroup.kill").exists():
            with contextlib.suppress(OSError):  # then one by one, below
                (self.dirs["memory"] / "cgroup.kill").write_text("1")
                return
        for d in self.dirs.values():
            for pid in self._read_pids(d):
                with contextlib.suppress(OSError):  # already gone
                    os.kill(pid, signal.SIGKILL)

    @staticmethod
    def _read_pids(d: Path) -> list[int]:
        try:
            return [int(p) for p in (d / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def remove(self, wait_s: float = 0.0) -> bool:
        """Kill what is left and remove the directories, retrying for up to ``wait_s`` while the
        killed processes exit; False if one could not be removed yet."""
        deadline = time.monotonic() + wait_s
        while True:
            self.kill()
            left = []
            for d in set(self.dirs.values()):
                try:
                    d.rmdir()
                except FileNotFoundError:
                    continue  # removed already
                except OSError:
                    left.append(d)
            if not left or time.monotonic() >= deadline:
                return not left
            time.sleep(0.02)


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def create(name: str, memory_bytes: int, max_procs: int) -> tuple[EvalCgroup | None, str]:
    """A fresh cgroup named ``name`` beside this process's own, with the limits set; or None and
    why not."""
    try:
        own = _own_paths()
    except OSError as err:
        return None, f"cgroup: unreadable ({err})"
    created: list[Path] = []
    try:
        if "memory" in own and (_ROOT / "memory").is_dir() and (_ROOT / "pids").is_dir() and "pids" in own:
            dirs = {c: _ROOT / c / own[c].lstrip("/") / name for c in ("memory", "pids")}
            for d in dirs.values():
                d.mkdir()
                created.append(d)
            group = EvalCgroup(dirs, unified=False)
            _write(dirs["memory"] / "memory.limit_in_bytes", str(memory_bytes))
            if (dirs["memory"] / "memory.memsw.limit_in_bytes").exists():
                try:
                    _write(dirs["memory"] / "memory.memsw.limit_in_bytes", str(memory_bytes))
                except OSError:
                    pass  # swap accounting off: memory.limit_in_bytes alone
            _write(dirs["pids"] / "pids.max", str(max_procs))
            return group, f"cgroup v1: memory {memory_bytes >> 20} MiB, {max_procs} processes for the whole tree"
        if "" in own and (_ROOT / "cgroup.controllers").exists():
            parent = _ROOT / own[""].lstrip("/")
            enabled = (parent / "cgroup.subtree_control").read_text().split()
            if not {"memory", "pids"} <= set(enabled):
                _write(parent / "cgroup.subtree_control", "+memory +pids")
            d = parent / name
            d.mkdir()
            created.append(d)
            group = EvalCgroup({"memory": d, "pids": d}, unified=True)
            _write(d / "memory.max", str(memory_bytes))
            if (d / "memory.swap.max").exists():
                _write(d / "memory.swap.max", "0")
            _write(d / "pids.max", str(max_procs))
            return group, f"cgroup v2: memory {memory_bytes >> 20} MiB, {max_procs} processes for the whole tree"
    except OSError as err:
        for d in created:
            with contextlib.suppress(OSError):  # best effort: the reason is reported below
                d.rmdir()
        return None, f"cgroup: not writable here ({err.strerror or err}); per-process limits only"
    return None, "cgroup: no memory and pids controllers mounted; per-process limits only"


def _parents() -> list[tuple[Path, bool]]:
    """Directories this process's evaluation cgroups are created in (v1: one per hierarchy)."""
    try:
        own = _own_paths()
    except OSError:
        return []
    if "memory" in own and "pids" in own:
        return [(_ROOT / c / own[c].lstrip("/"), False) for c in ("memory", "pids")]
    if "" in own:
        return [(_ROOT / own[""].lstrip("/"), True)]
    return []


def sweep(dead_pid: int | None = None) -> int:
    """Remove evaluation cgroups left by zygotes that are gone (``dead_pid``, or any whose pid no
    longer exists): a zygote killed with SIGKILL cannot clean up after itself. Returns how many."""
    removed = 0
    for parent, unified in _parents():
        try:
            entries = list(parent.iterdir())
        except OSError:
            continue
        for d in entries:
            match = _NAME.match(d.name)
            if not match or not d.is_dir():
                continue
            pid = int(match.group(1))
            if pid == dead_pid or not Path(f"/proc/{pid}").exists():
                removed += EvalCgroup({"memory": d, "pids": d}, unified).remove(wait_s=1.0)
    return removed

"""Each layer of the evaluation jail on its own (``forge_kernels.eval.isolation``): a forked child
enters the jail and reports what it can and cannot do."""

from __future__ import annotations

import ctypes
import errno
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import forge_kernels
from forge_kernels.eval import EvalOptions, Evaluator, FaultClass
from forge_kernels.eval.isolation import cgroups
from forge_kernels.eval.isolation.jail import enter_jail, jail_spec

PROJECT = Path(forge_kernels.__file__).resolve().parents[1]


def in_jail(probe: Callable[[], Any]) -> Any:
    """Run ``probe`` in a freshly forked, jailed child; its JSON-able result (or the error)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            enter_jail(jail_spec("cpu"), None)
            out = json.dumps({"ok": probe()})
        except BaseException as err:  # noqa: BLE001
            out = json.dumps({"error": f"{type(err).__name__}: {err}"})
        os.write(write_fd, out.encode())
        os._exit(0)
    os.close(write_fd)
    data = b""
    while chunk := os.read(read_fd, 1 << 16):
        data += chunk
    os.close(read_fd)
    os.waitpid(pid, 0)
    result = json.loads(data)
    assert "ok" in result, result
    return result["ok"]


def test_identity_and_privileges():
    def probe() -> dict[str, str]:
        status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
        return {k: status[k].strip() for k in ("Uid", "CapEff", "CapPrm", "CapBnd", "NoNewPrivs", "Seccomp")} | {
            "pid": str(os.getpid()), "procs": str(len([p for p in os.listdir("/proc") if p.isdigit()]))}

    seen = in_jail(probe)
    assert seen["Uid"].split()[0] != "0"
    assert int(seen["CapEff"], 16) == int(seen["CapPrm"], 16) == int(seen["CapBnd"], 16) == 0
    assert seen["NoNewPrivs"] == "1" and seen["Seccomp"] == "2"
    assert seen["pid"] == "2" and int(seen["procs"]) <= 3  # init, itself: the host's processes are not there


def test_filesystem_view():
    def probe() -> dict[str, Any]:
        def writable(path: str) -> bool:
            try:
                with open(path, "w") as f:
                    f.write("x")
                return True
            except OSError:
                return False

        builtin = os.path.join(os.path.dirname(forge_kernels.__file__), "tasks", "builtin")
        return {
            "tmp": writable("/tmp/x"), "cwd": os.getcwd(), "usr": writable("/usr/fk-test"),
            "package": writable(os.path.join(os.path.dirname(forge_kernels.__file__), "fk-test")),
            "builtin": os.listdir(builtin), "project": os.path.exists(str(PROJECT / "tests")),
            "passwd": open("/etc/passwd").read(), "dev": sorted(os.listdir("/dev")),
        }

    seen = in_jail(probe)
    assert seen["tmp"] and seen["cwd"] == "/tmp"
    assert not seen["usr"] and not seen["package"]
    assert seen["builtin"] == [] and not seen["project"]
    assert "/root" not in seen["passwd"]
    assert set(seen["dev"]) <= {"null", "zero", "full", "random", "urandom", "stdin", "stdout", "stderr", "fd", "shm"}


def test_environment_allow_listed(monkeypatch):
    monkeypatch.setenv("FORGE_TEST_TOKEN", "secret")
    assert "FORGE_TEST_TOKEN" not in in_jail(lambda: dict(os.environ))


def test_no_network():
    import socket

    def probe() -> dict[str, str]:
        seen = {}
        for name, family in (("inet", socket.AF_INET), ("inet6", socket.AF_INET6), ("netlink", socket.AF_NETLINK)):
            try:
                socket.socket(family, socket.SOCK_DGRAM if family != socket.AF_NETLINK else socket.SOCK_RAW)
                seen[name] = "created"
            except OSError as err:
                seen[name] = errno.errorcode[err.errno]
        seen["interfaces"] = " ".join(sorted(os.listdir("/sys/class/net"))) if os.path.isdir("/sys/class/net") else ""
        return seen

    seen = in_jail(probe)
    assert seen["inet"] == seen["inet6"] == seen["netlink"] == "EACCES"


@pytest.mark.parametrize(("name", "number", "args", "expected"), [
    ("ptrace", 101, (16, 1, 0, 0), "EPERM"),
    ("process_vm_readv", 310, (1, 0, 0, 0, 0, 0), "EPERM"),
    ("pidfd_open", 434, (1, 0), "EPERM"),
    ("setns", 308, (0, 0), "EPERM"),
    ("unshare", 272, (0x10000000,), "EPERM"),
    ("mount", 165, (0, 0, 0, 0, 0), "EPERM"),
    ("bpf", 321, (5, 0, 0), "EPERM"),
    ("keyctl", 250, (0, 0, 0, 0, 0), "EPERM"),
    ("personality", 135, (0x0400000,), "EPERM"),
    ("io_uring_setup", 425, (8, 0), "EPERM"),
    ("userfaultfd", 323, (0,), "EPERM"),
    ("perf_event_open", 298, (0, -1, 0, -1, 0), "EPERM"),
    ("clone into a user namespace", 56, (0x10000000 | 17, 0, 0, 0, 0), "EPERM"),
    ("clone3", 435, (0, 0), "ENOSYS"),
    ("prctl(PR_SET_PDEATHSIG)", 157, (1, 0, 0, 0, 0), "EPERM"),
])
def test_seccomp_denies(name, number, args, expected):
    def probe() -> str:
        libc = ctypes.CDLL(None, use_errno=True)
        result = libc.syscall(number, *[ctypes.c_long(a) for a in args])
        return "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()]

    assert in_jail(probe) == expected, name


def test_landlock_refuses_writes_outside_tmp():
    """Even where a mount is writable (/dev/shm is, by design), Landlock is a second layer: nothing
    may be created in /dev itself."""
    def probe() -> str:
        try:
            os.mkdir("/dev/fk-test")
            return "created"
        except OSError as err:
            return errno.errorcode[err.errno]

    assert in_jail(probe) in ("EACCES", "EPERM", "EROFS")


def test_cgroup_round_trip():
    group, note = cgroups.create(f"forge-eval-{os.getpid()}-999999", 256 << 20, 32)
    if group is None:
        pytest.skip(f"this machine gives no writable cgroup: {note}")
    try:
        pid = os.fork()
        if pid == 0:
            group.join()
            os._exit(0)
        os.waitpid(pid, 0)
        assert not group.oom_killed() and not group.hit_process_limit()
    finally:
        assert group.remove(wait_s=2.0)


def test_evaluator_refuses_without_the_jail(tasks):
    """If the jail cannot be built, the evaluator says so instead of running unjailed."""
    with Evaluator(EvalOptions(device="cpu")) as ev:
        ev.zygote("cpu").jail_unavailable = "unshare: Operation not permitted"
        r = ev.evaluate(tasks["relu"], "class ModelNew: pass")
        assert r.fault is FaultClass.INTERNAL_ERROR and "isolation='audit'" in (r.error or ""), r.error
        audit = ev.evaluate(tasks["relu"], (Path(__file__).parent / "kernels" / "relu_ok.py").read_text(),
                            EvalOptions(device="cpu", isolation="audit"))
        assert audit.correct, audit.error


def test_read_only_extras_under_tmp_stay_visible(tmp_path):
    """Extra read-only paths under the host's /tmp (a CUDA build dir, say) are bound inside the
    private /tmp, read-only."""
    extra = tmp_path / "build"
    extra.mkdir()
    (extra / "lib.so").write_text("not really a library")
    if not str(extra).startswith("/tmp/"):
        pytest.skip(f"pytest's tmp_path is not under /tmp here: {extra}")
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            enter_jail(jail_spec("cpu", extra_read_only=[str(extra)]), None)
            seen = open(extra / "lib.so").read()
            try:
                open(extra / "other", "w").write("x")
                seen += "|writable"
            except OSError:
                seen += "|read-only"
        except BaseException as err:  # noqa: BLE001
            seen = f"{type(err).__name__}: {err}"
        os.write(write_fd, seen.encode())
        os._exit(0)
    os.close(write_fd)
    data = os.read(read_fd, 4096).decode()
    os.waitpid(pid, 0)
    assert data == "not really a library|read-only", data

"""The jail: the operating-system boundary around every process that runs untrusted code.

:func:`enter_jail` is called in a child forked from the warm zygote, before any untrusted code.
It forks twice more and returns only in the great-grandchild, which is then:

* in its own PID namespace, whose init is its parent (its own ``/proc``; when it exits, init
  exits and the kernel kills everything it started, daemons included), in its own network (no
  interfaces), IPC and UTS namespaces;
* in a private mount namespace whose root is an empty tmpfs holding only read-only binds of what
  Python needs (interpreter, stdlib, site-packages, ``/usr``), the harness package without the
  built-in tasks and solutions, a synthetic ``/etc``, a minimal ``/dev`` (plus GPU nodes) and a
  size-limited writable ``/tmp`` that is also its working directory;
* an unprivileged uid (a fresh one per evaluation when the zygote is root) in its own user
  namespace, with no capabilities, an empty bounding set and ``no_new_privs``;
* under Landlock (writes only in ``/tmp``, no TCP, signals scoped) and a seccomp filter
  (:mod:`.seccomp`), inside a per-evaluation cgroup (:mod:`.cgroups`) or, without one, under
  ``RLIMIT_NPROC``.

The forked child stays outside the PID namespace and only waits: it ends as the jailed process
ended, and if it is killed the namespace's init dies too (``PR_SET_PDEATHSIG``, which the seccomp
filter then forbids changing), and with it everything inside.
"""

from __future__ import annotations

import ctypes
import glob
import os
import resource
import signal
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass, field

from forge_kernels.eval.isolation.cgroups import EvalCgroup
from forge_kernels.eval.isolation.landlock import restrict_writes
from forge_kernels.eval.isolation.seccomp import install_filter

__all__ = ["JailSpec", "JailError", "jail_spec", "enter_jail", "jail_available", "SANDBOX_ENV_KEYS"]

_CLONE_NEWNS, _CLONE_NEWUTS, _CLONE_NEWIPC = 0x20000, 0x4000000, 0x8000000
_CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_NOATIME, _MS_NODIRATIME, _MS_BIND, _MS_REC = 32, 1024, 2048, 4096, 16384
_MS_PRIVATE, _MS_RELATIME = 1 << 18, 1 << 21
_MNT_DETACH = 2
_SYS_PIVOT_ROOT = 155
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_LAST_CAP = 63
_UID_BASE = 1_000_000  # per-evaluation uids when the zygote is root: 1,000,000 + pid mod 1,000,000
_STATVFS_TO_MS = {os.ST_NOSUID: _MS_NOSUID, os.ST_NODEV: _MS_NODEV, os.ST_NOEXEC: _MS_NOEXEC,
                  os.ST_NOATIME: _MS_NOATIME, os.ST_NODIRATIME: _MS_NODIRATIME, os.ST_RELATIME: _MS_RELATIME}
_DEVICES = ("null", "zero", "full", "random", "urandom")
_ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives")

# What a jailed process keeps of the zygote's environment: prefixes and names. Everything else
# (tokens, the server's configuration, paths into the project) is dropped.
SANDBOX_ENV_KEYS = ("PATH", "LANG", "LC_", "LD_LIBRARY_PATH", "CUDA_", "NVIDIA_", "TRITON_", "TORCH_", "PYTORCH_",
                    "OMP_", "MKL_", "OPENBLAS_", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED")


class JailError(RuntimeError):
    """The jail could not be built here (no user namespaces, a kernel without them, ...)."""


@dataclass(frozen=True)
class JailSpec:
    """What a jailed process sees. Paths are host paths, bound at the same place."""

    read_only: tuple[str, ...]
    hidden: tuple[str, ...] = ()
    devices: tuple[str, ...] = _DEVICES
    bind_sys: bool = False
    tmp_mb: int = 1024
    max_procs: int = 256
    env: dict[str, str] = field(default_factory=dict)


def _python_roots() -> set[str]:
    """Directories the interpreter may import from (stdlib, site-packages, sys.path entries)."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable))}
    roots.update(v for k, v in sysconfig.get_paths().items() if k != "scripts")
    roots.update(p for p in sys.path if p)
    return {p for p in roots if os.path.isdir(p)}


def jail_spec(device: str, extra_read_only: Sequence[str] = (), tmp_mb: int = 1024, max_procs: int = 256) -> JailSpec:
    """The view of an evaluation child: Python, the harness (``forge_kernels`` without
    ``tasks/builtin``), and on a GPU the NVIDIA device nodes and ``/sys``."""
    import forge_kernels

    package = os.path.realpath(forge_kernels.__path__[0])
    project = os.path.dirname(package)
    roots = {p for p in _python_roots() if os.path.realpath(p) != project}  # never the project tree itself
    read_only = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", package, *roots, *extra_read_only}
    read_only.update(f"/etc/{name}" for name in _ETC_FILES)
    devices = list(_DEVICES)
    if device == "cuda":
        devices += sorted(os.path.basename(p) for p in glob.glob("/dev/nvidia*"))
    env = {k: v for k, v in os.environ.items() if k.startswith(SANDBOX_ENV_KEYS)}
    env.update(HOME="/tmp", TMPDIR="/tmp", TRITON_CACHE_DIR="/tmp/.triton", TORCHINDUCTOR_CACHE_DIR="/tmp/.inductor",
               XDG_CACHE_HOME="/tmp/.cache", PYTHONDONTWRITEBYTECODE="1")
    return JailSpec(
        read_only=tuple(sorted(p for p in read_only if os.path.lexists(p))),
        hidden=(os.path.join(package, "tasks", "builtin"),),
        devices=tuple(devices), bind_sys=device == "cuda", tmp_mb=tmp_mb, max_procs=max_procs, env=env,
    )


# -- syscalls -------------------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise JailError(f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(source.encode() if source else None, target.encode(), fstype.encode() if fstype else None,
                       flags, data.encode() if data else None), f"mount {source or fstype} on {target}")


def _prctl(option: int, arg: int = 0) -> None:
    _check(_libc.prctl(option, arg, 0, 0, 0), f"prctl({option})")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


# -- building the root ----------------------------------------------------------------------------

def _outermost(paths: Sequence[str]) -> list[str]:
    """Drop paths that lie inside another path of the list (their ancestor's bind covers them)."""
    kept: list[str] = []
    for p in sorted({os.path.normpath(p) for p in paths}, key=len):
        if not any(p == k or p.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(p)
    return kept


def _bind(fd_path: str, target: str, source_is_dir: bool, read_only: bool = True) -> None:
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if source_is_dir:
        os.makedirs(target, exist_ok=True)
    elif not os.path.exists(target):
        open(target, "w").close()
    _mount(fd_path, target, None, _MS_BIND | _MS_REC)
    if read_only:  # keep the flags the kernel locks (nosuid, noexec, atime) and add ro
        kept = sum(ms for st, ms in _STATVFS_TO_MS.items() if os.statvfs(target).f_flag & st)
        _mount(None, target, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | kept)


def _build_root(spec: JailSpec, uid: int) -> None:
    """In a fresh mount namespace: assemble the new root on a tmpfs and pivot into it."""
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    sources: list[tuple[str, int, bool, str | None]] = []  # (path, O_PATH fd, is_dir, symlink text)
    for path in _outermost(spec.read_only):
        if os.path.islink(path) and os.path.dirname(path) == "/":  # /lib -> usr/lib on merged-usr systems
            sources.append((path, -1, False, os.readlink(path)))
            continue
        real = os.path.realpath(path)
        sources.append((path, os.open(real, os.O_PATH | os.O_CLOEXEC), os.path.isdir(real), None))
    device_fds = {name: os.open(f"/dev/{name}", os.O_PATH | os.O_CLOEXEC) for name in spec.devices
                  if os.path.exists(f"/dev/{name}")}
    sys_fd = os.open("/sys", os.O_PATH | os.O_CLOEXEC) if spec.bind_sys else -1
    new = "/tmp"  # the old /tmp is only hidden in this private mount namespace; sources were opened above
    _mount("tmpfs", new, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=16m,mode=755")
    under_tmp = [src for src in sources if src[0].startswith("/tmp/")]  # bound after the private /tmp
    for path, fd, is_dir, link in sources:
        if path.startswith("/tmp/"):
            continue
        if link is not None:
            os.symlink(link, new + path)
        else:
            _bind(f"/proc/self/fd/{fd}", new + path, is_dir)
            os.close(fd)
    os.makedirs(new + "/etc", exist_ok=True)
    _write(new + "/etc/passwd", f"root:x:0:0:root:/:/usr/sbin/nologin\nsandbox:x:{uid}:{uid}::/tmp:/usr/sbin/nologin\n")
    _write(new + "/etc/group", f"root:x:0:\nsandbox:x:{uid}:\n")
    _write(new + "/etc/hosts", "127.0.0.1 localhost\n")
    os.makedirs(new + "/dev", exist_ok=True)
    _mount("tmpfs", new + "/dev", "tmpfs", _MS_NOSUID, "size=64k,mode=755")
    for name, fd in device_fds.items():
        _bind(f"/proc/self/fd/{fd}", f"{new}/dev/{name}", os.path.isdir(f"/dev/{name}"), read_only=False)
        os.close(fd)
    for i, stream in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{i}", f"{new}/dev/{stream}")
    os.symlink("/proc/self/fd", f"{new}/dev/fd")
    os.makedirs(new + "/dev/shm")
    _mount("tmpfs", new + "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, "size=64m,mode=1777")
    os.makedirs(new + "/proc")
    _mount("proc", new + "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    if sys_fd >= 0:
        _bind(f"/proc/self/fd/{sys_fd}", new + "/sys", True)
        os.close(sys_fd)
    os.makedirs(new + "/tmp", exist_ok=True)
    _mount("tmpfs", new + "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={spec.tmp_mb}m,mode=1777")
    for path, fd, is_dir, _ in under_tmp:  # a project or venv in /tmp, a CUDA build dir under it
        _bind(f"/proc/self/fd/{fd}", new + path, is_dir)
        os.close(fd)
    for hidden in spec.hidden:  # after every bind: the package may live under /tmp
        if os.path.isdir(new + hidden):
            _mount("tmpfs", new + hidden, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV, "size=4k,mode=555")
    os.makedirs(new + "/.old")
    _check(_libc.syscall(_SYS_PIVOT_ROOT, new.encode(), (new + "/.old").encode()), "pivot_root")
    os.chdir("/")
    _check(_libc.umount2(b"/.old", _MNT_DETACH), "umount the old root")
    os.rmdir("/.old")
    _mount(None, "/", None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    os.chdir("/tmp")


def _map_ids(uid: int, gid: int) -> None:
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")


def _drop_capabilities() -> None:
    """Empty bounding, ambient, effective, permitted and inheritable sets."""
    for cap in range(_LAST_CAP + 1):
        if _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # EINVAL: no such cap
            _check(-1, f"drop capability {cap} from the bounding set")
    _libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: all zero (two 32-bit words)
    _check(_libc.capset(header, data), "capset")


# -- entering -------------------------------------------------------------------------------------

def _wait_and_mirror(pid: int, init: bool) -> None:
    """Wait for ``pid`` and end the same way. ``init``: this is PID 1 of the namespace, which
    reaps every orphan, and cannot kill itself with a signal (the kernel ignores it), so it
    reports a signal as exit code 128 + signal, which the outer waiter turns back into one."""
    os.closerange(3, 1 << 16)  # not the result pipe: its EOF must come from the jailed process alone
    while True:
        try:
            done, status = os.waitpid(-1 if init else pid, 0)
        except InterruptedError:
            continue
        if done == pid:
            break
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
    elif not init and 128 < os.WEXITSTATUS(status) <= 128 + 64:
        sig = os.WEXITSTATUS(status) - 128
    else:
        os._exit(os.WEXITSTATUS(status))
    if init:
        os._exit(128 + sig)
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)


def enter_jail(spec: JailSpec, cgroup: EvalCgroup | None) -> list[str]:
    """Jail the calling process (single-threaded, freshly forked). Returns in the jailed process
    only, with notes describing each layer; the caller's process becomes a waiter and never
    returns. Raises :class:`JailError` when a layer cannot be built, in the caller's process or in
    the half-built jail: either way the caller must report it and exit, running nothing untrusted."""
    notes: list[str] = []
    root = os.geteuid() == 0
    if cgroup is not None:
        cgroup.join()
    flags = _CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWUTS
    uid, gid = os.geteuid(), os.getegid()
    if root:
        # a uid of its own: even outside the namespaces it could signal nothing but itself
        uid = gid = _UID_BASE + os.getpid() % _UID_BASE
        # mount as real root first; the user namespace comes after the uid is dropped
        _check(_libc.unshare(flags), "unshare namespaces")
    else:
        _check(_libc.unshare(flags | _CLONE_NEWUSER), "unshare a user namespace (are user namespaces enabled?)")
        _map_ids(uid, gid)
    pid = os.fork()
    if pid:
        _wait_and_mirror(pid, init=False)
    try:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        _build_root(spec, uid)
        if root:
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            _prctl(_PR_SET_DUMPABLE, 1)  # so that /proc/self stays ours (ptrace is denied by seccomp)
            if _libc.unshare(_CLONE_NEWUSER) == 0:
                _map_ids(uid, gid)
                notes.append(f"user: uid {uid} in its own user namespace")
            else:
                notes.append(f"user: uid {uid} (user namespace refused: {os.strerror(ctypes.get_errno())})")
        else:
            notes.append(f"user: uid {uid} in its own user namespace")
        resource.setrlimit(resource.RLIMIT_NPROC, (spec.max_procs, spec.max_procs))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.environ.clear()
        os.environ.update(spec.env)
        _drop_capabilities()
        _prctl(_PR_SET_NO_NEW_PRIVS, 1)
        notes.append("namespaces: pid, mount, network (no interfaces), ipc, uts; read-only root, private /tmp "
                     f"({spec.tmp_mb} MiB), no capabilities, no_new_privs")
        notes.append(restrict_writes(["/tmp", "/dev/shm"]))
        notes.append(install_filter())
    except OSError as err:
        raise JailError(f"{err}") from err
    pid = os.fork()  # the namespace's init stays behind: PID 1 ignores its own default signals
    if pid:
        _wait_and_mirror(pid, init=True)
    return notes


def jail_available() -> str | None:
    """None if a jail can be built here, else why not (checked by forking a throwaway child)."""
    spec = jail_spec("cpu")
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            os.setpgid(0, 0)
            enter_jail(spec, None)
            os.write(write_fd, b"ok")
            os._exit(0)
        except BaseException as err:  # noqa: BLE001
            os.write(write_fd, f"{type(err).__name__}: {err}".encode()[:500])
            os._exit(1)
    os.close(write_fd)
    message = b""
    while chunk := os.read(read_fd, 4096):
        message += chunk
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    if message == b"ok":
        return None
    return message.decode(errors="replace") or f"the test jail ended with status {status}"


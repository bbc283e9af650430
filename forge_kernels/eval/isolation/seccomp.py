"""A seccomp filter for evaluated code: the syscalls that reach other processes, the kernel's
configuration or a way out of the namespaces fail with ``EPERM``.

The filter is a short classic-BPF program assembled here (x86-64 only; elsewhere
:func:`install_filter` reports that it is unavailable and the namespaces stay the boundary). It is
hand-assembled rather than built with libseccomp because it is small, and because a fresh machine
with only Python may lack ``libseccomp.so``. Each denial is tested in ``tests/eval/test_isolation.py``.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

__all__ = ["DENIED_SYSCALLS", "install_filter"]

# x86-64 syscall numbers (arch/x86/entry/syscalls/syscall_64.tbl).
DENIED_SYSCALLS: dict[str, int] = {
    # other processes' memory and control
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "process_madvise": 440,
    "pidfd_open": 434, "pidfd_send_signal": 424, "pidfd_getfd": 438,
    # namespaces and mounts: no way out of (or around) the jail
    "setns": 308, "unshare": 272, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442, "open_by_handle_at": 304, "name_to_handle_at": 303,
    # the kernel itself
    "bpf": 321, "keyctl": 250, "add_key": 248, "request_key": 249, "personality": 135,
    "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
    "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "swapon": 167, "swapoff": 168, "reboot": 169, "sethostname": 170,
    "setdomainname": 171, "iopl": 172, "ioperm": 173, "quotactl": 179, "quotactl_fd": 443, "acct": 163,
    "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159, "syslog": 103,
    "vhangup": 153, "lookup_dcookie": 212, "uselib": 134, "fanotify_init": 300,
}
_CLONE, _CLONE3, _PRCTL, _SOCKET = 56, 435, 157, 41
_NAMESPACE_FLAGS = 0x7E020080  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET|NEWTIME
_PR_SET_PDEATHSIG = 1
_AF_UNIX = 1

_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_BIT = 0x40000000
_LD_ABS_W, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL = 0x7FFF0000, 0x80000000
_NR, _ARCH, _ARG0 = 0, 4, 16
_SECCOMP_SET_MODE_FILTER, _SYS_SECCOMP = 1, 317


def _errno(code: int) -> int:
    return 0x00050000 | code


def _program() -> list[tuple[int, int, int, int]]:
    """(code, jt, jf, k) instructions. Jumps are relative to the next instruction."""
    denied = sorted(set(DENIED_SYSCALLS.values()))
    prog: list[tuple[int, int, int, int]] = [
        (_LD_ABS_W, 0, 0, _ARCH),
        (_JEQ, 1, 0, _AUDIT_ARCH_X86_64),
        (_RET, 0, 0, _KILL),  # another ABI (i386 via int 0x80) would bypass the numbers below
        (_LD_ABS_W, 0, 0, _NR),
    ]
    # after the deny list, syscalls judged by an argument; the shared returns come last
    tail = [
        ("clone", [(_JEQ, 0, 2, _CLONE), (_LD_ABS_W, 0, 0, _ARG0), (_JSET, "eperm", "allow", _NAMESPACE_FLAGS)]),
        ("clone3", [(_JEQ, "enosys", 0, _CLONE3)]),  # glibc falls back to clone, whose flags are visible
        ("prctl", [(_JEQ, 0, 2, _PRCTL), (_LD_ABS_W, 0, 0, _ARG0), (_JEQ, "eperm", "allow", _PR_SET_PDEATHSIG)]),
        ("socket", [(_JEQ, 0, 2, _SOCKET), (_LD_ABS_W, 0, 0, _ARG0), (_JEQ, "allow", "eacces", _AF_UNIX)]),
    ]
    body: list[tuple[int, object, object, int]] = [(_JGE, "eperm", 0, _X32_BIT)]
    body += [(_JEQ, "eperm", 0, nr) for nr in denied]
    for _, instructions in tail:
        body += instructions
    body.append((_RET, 0, 0, _ALLOW))
    labels = {"allow": len(body) - 1}
    body += [(_RET, 0, 0, _errno(errno.EPERM)), (_RET, 0, 0, _errno(errno.ENOSYS)), (_RET, 0, 0, _errno(errno.EACCES))]
    labels.update(eperm=len(body) - 3, enosys=len(body) - 2, eacces=len(body) - 1)

    def target(pos: int, jump: object) -> int:
        if isinstance(jump, str):
            offset = labels[jump] - pos - 1
            if not 0 <= offset < 256:
                raise AssertionError(f"seccomp jump of {offset} does not fit in 8 bits")
            return offset
        return int(jump)  # type: ignore[call-overload]

    for pos, (code, jt, jf, k) in enumerate(body):
        prog.append((code, target(pos, jt), target(pos, jf), k))
    return prog


def install_filter() -> str:
    """Install the filter on this thread and its future children (irrevocable; needs
    ``no_new_privs``). Returns a note for the evaluation's sandbox notes."""
    if platform.machine() != "x86_64":
        return f"seccomp: no filter for {platform.machine()} (namespaces only)"
    prog = _program()
    raw = b"".join(struct.pack("<HBBI", code, jt, jf, k) for code, jt, jf, k in prog)
    buf = ctypes.create_string_buffer(raw, len(raw))

    class _SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = _SockFprog(len(prog), ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(_SYS_SECCOMP, _SECCOMP_SET_MODE_FILTER, 0, ctypes.byref(fprog)) != 0:
        raise OSError(ctypes.get_errno(), f"seccomp filter refused: {errno.errorcode.get(ctypes.get_errno())}")
    return f"seccomp: {len(DENIED_SYSCALLS)} syscalls denied, namespace clones denied, sockets AF_UNIX only"

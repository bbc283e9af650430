"""Landlock, where the kernel has it: writes only beneath the writable dirs, no TCP, and (ABI >= 6)
no signals or abstract-socket connections outside the evaluation's own domain.

A second layer under the mount namespace (which is what makes everything else read-only): if a
mount were ever left writable by mistake, Landlock still refuses the write. Three syscalls through
ctypes; the Python ``landlock`` package is a pre-release, and this is 40 lines.
"""

from __future__ import annotations

import ctypes
import os
import struct

__all__ = ["restrict_writes"]

_CREATE, _ADD_RULE, _RESTRICT = 444, 445, 446
_VERSION_FLAG = 1
_RULE_PATH_BENEATH = 1
_WRITE_FILE, _REMOVE_DIR, _REMOVE_FILE = 1 << 1, 1 << 4, 1 << 5
_MAKE_ALL = sum(1 << b for b in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
_REFER, _TRUNCATE = 1 << 13, 1 << 14
_NET_TCP = (1 << 0) | (1 << 1)  # bind, connect
_SCOPE_ALL = (1 << 0) | (1 << 1)  # abstract unix sockets, signals


def restrict_writes(writable: list[str], open_for_writing: tuple[str, ...] = ("/dev", "/proc"), scoped: bool = True,
                    network: bool = True) -> str:
    """Restrict this process (and its future children) for good; needs ``no_new_privs``.
    ``writable`` dirs get every write right; existing files under ``open_for_writing`` may be opened
    for writing (``/dev/null``, GPU device nodes, ``/proc/self/task/*/comm``) but nothing there
    may be created or removed. ``scoped``: signals and abstract sockets stay inside the domain."""
    libc = ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(_CREATE, None, 0, _VERSION_FLAG)
    if abi < 1:
        return "landlock: unavailable in this kernel"
    handled = _WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE_ALL
    if abi >= 2:
        handled |= _REFER
    if abi >= 3:
        handled |= _TRUNCATE
    attr = struct.pack("<QQQ", handled, _NET_TCP if abi >= 4 and network else 0,
                       _SCOPE_ALL if abi >= 6 and scoped else 0)
    size = 8 if abi < 4 else (16 if abi < 6 else 24)
    ruleset = libc.syscall(_CREATE, ctypes.c_char_p(attr), size, 0)
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        opened = [(d, _WRITE_FILE | (handled & _TRUNCATE)) for d in open_for_writing]
        for path, access in [(d, handled) for d in writable] + opened:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = struct.pack("<Qi", access, fd)  # struct landlock_path_beneath_attr is packed
                if libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.c_char_p(rule), 0) != 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule({path}) failed")
            finally:
                os.close(fd)
        if libc.syscall(_RESTRICT, ruleset, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    scope = ", signals and abstract sockets scoped" if abi >= 6 and scoped else ""
    tcp = ", no TCP" if abi >= 4 and network else ""
    return f"landlock: ABI {abi}, writes only in {', '.join(writable)}{tcp}{scope}"

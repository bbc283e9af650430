"""Isolation of evaluated code.

The boundary is the operating system's (:mod:`.jail`: namespaces, an unprivileged uid, no
capabilities, :mod:`.landlock`, :mod:`.seccomp`, a per-evaluation :mod:`.cgroups` group). The
audit hook (:mod:`.audit`) is a second line that names what a candidate tried in its error text;
it is never what stops it.
"""

from forge_kernels.eval.isolation.audit import SandboxViolation, install_audit_hook
from forge_kernels.eval.isolation.jail import JailError, JailSpec, enter_jail, jail_available, jail_spec

__all__ = ["JailError", "JailSpec", "SandboxViolation", "enter_jail", "install_audit_hook", "jail_available",
           "jail_spec"]

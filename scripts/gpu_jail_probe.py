"""What the lent GPU machine allows the evaluation jail (run by scripts/gpu_check.sh first):
identity, namespaces, cgroups, and a CUDA matmul inside the jail with each layer in turn left out
(to find which one a driver objects to)."""

from __future__ import annotations

import dataclasses
import glob
import os
import subprocess
import sys

from forge_kernels.eval.isolation import cgroups, jail

print("uid", os.geteuid(), "kernel", os.uname().release)
print("/proc/self/cgroup:", open("/proc/self/cgroup").read().strip().replace("\n", " | "))
print(subprocess.run("ls -la /dev/nvidia* /dev/dri 2>&1; ls /sys/fs/cgroup | head; mount | grep -E 'cgroup|/proc|/dev '",
                     shell=True, capture_output=True, text=True).stdout)
group, note = cgroups.create(f"forge-probe-{os.getpid()}", 1 << 30, 64)
print("cgroup:", note)
if group is not None:
    group.remove()
print("jail (cpu):", jail.jail_available() or "ok")

NOOP = lambda *a, **k: "skipped"  # noqa: E731


def attempt(name: str, **patches) -> None:
    spec = jail.jail_spec("cuda")
    if patches.pop("all_dev", False):
        spec = dataclasses.replace(spec, devices=tuple(sorted(os.path.basename(p) for p in glob.glob("/dev/*")
                                                             if not os.path.isdir(p))))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            for attr, value in patches.items():
                setattr(jail, attr, value)
            notes = jail.enter_jail(spec, None)
            import torch

            x = torch.randn(256, 256, device="cuda")
            os.write(w, f"{name}: ok {float((x @ x).sum()):.1f} | {' | '.join(notes)[:300]}".encode())
            os._exit(0)
        except BaseException as err:  # noqa: BLE001
            os.write(w, f"{name}: FAILED {type(err).__name__}: {str(err)[:150]}".encode())
            os._exit(1)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.waitpid(pid, 0)
    print(data.decode(), flush=True)


from forge_kernels.eval.isolation.landlock import restrict_writes  # noqa: E402

attempt("all layers")
attempt("landlock, /dev only", restrict_writes=lambda w: restrict_writes(w, open_for_writing=("/dev",)))
attempt("landlock unscoped", restrict_writes=lambda w: restrict_writes(w, scoped=False))
attempt("landlock without net", restrict_writes=lambda w: restrict_writes(w, network=False))
attempt("landlock, writes anywhere", restrict_writes=lambda w: restrict_writes(w + ["/"]))
attempt("landlock unscoped, no net, writes anywhere",
        restrict_writes=lambda w: restrict_writes(w + ["/"], scoped=False, network=False))
sys.exit(0)

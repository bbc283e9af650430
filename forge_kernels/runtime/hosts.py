"""Hosts of a multi-host run: host agent addresses, hostfiles, per-actor placement lines and the
per-pair store check (shared memory only when trainer and generator share a host).

A host is a Monarch worker loop (``forge-kernels worker --address tcp://HOST:PORT``); the controller
attaches to the listed hosts with :func:`monarch.actor.attach_to_workers` and places each actor on
``runtime_overrides.<actor>.host`` (an index into ``runtime.hosts``, or a list of indices for the
replicas of a service).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "HOSTS",
    "HostAddress",
    "HostDiedError",
    "check_bind_allowed",
    "check_store_pair",
    "host_indices",
    "host_name",
    "next_live_host",
    "parse_host",
    "read_hostfile",
]

log = logging.getLogger(__name__)
_TCP = re.compile(r"^tcp://(?P<host>\[[0-9a-fA-F:]+\]|[A-Za-z0-9.\-]+):(?P<port>\d{1,5})$")


class HostAddress(str):
    """A validated ``tcp://HOST:PORT`` host agent address."""

    @property
    def hostname(self) -> str:
        """The HOST part, without IPv6 brackets."""
        return _TCP.match(self).group("host").strip("[]")  # type: ignore[union-attr]

    @property
    def is_loopback(self) -> bool:
        """True for ``localhost`` and loopback IPs (127.0.0.0/8, ::1)."""
        if self.hostname == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.hostname).is_loopback
        except ValueError:
            return False


def parse_host(address: str) -> HostAddress:
    """Validate one host agent address; raises ``ValueError`` naming the bad value."""
    match = _TCP.match(address.strip())
    if match is None or not 0 < int(match.group("port")) < 65536:
        raise ValueError(f"host address {address!r} is not of the form tcp://HOST:PORT "
                         f"(PORT 1..65535), e.g. tcp://127.0.0.1:26600")
    return HostAddress(address.strip())


def read_hostfile(path: str | Path) -> list[HostAddress]:
    """Host addresses from a file, one per line; blank lines and ``#`` comments are skipped."""
    hosts = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            hosts.append(parse_host(line))
        except ValueError as err:
            raise ValueError(f"{path}:{number}: {err}") from None
    if not hosts:
        raise ValueError(f"hostfile {path} lists no hosts (expected one tcp://HOST:PORT a line)")
    return hosts


def check_bind_allowed(address: HostAddress, bind_any: bool) -> None:
    """A host agent runs any actor it is sent: refuse a non-loopback bind unless asked explicitly."""
    if not address.is_loopback and not bind_any:
        raise ValueError(f"--address {address} is not loopback; a host agent executes whatever a "
                         f"controller sends it, so binding it beyond this machine needs --bind-any "
                         f"(and a trusted network)")


def host_indices(actor: str, host: int | Sequence[int] | None, replicas: int,
                 hosts: Sequence[HostAddress]) -> list[int]:
    """Host index of each replica of ``actor``: one index for all, or one per replica.

    With no ``host``, replicas go to host 0 when hosts are listed, else to the controller's host
    (index ``-1``).
    """
    if host is None:
        return [0 if hosts else -1] * replicas
    indices = [host] * replicas if isinstance(host, int) else list(host)
    if len(indices) != replicas:
        raise ValueError(f"runtime_overrides.{actor}.host={list(indices)} names {len(indices)} hosts "
                         f"for {replicas} replicas (expected one index, or one per replica)")
    for index in indices:
        if not 0 <= index < len(hosts):
            raise ValueError(f"runtime_overrides.{actor}.host={index} is out of range: runtime.hosts "
                             f"lists {len(hosts)} host(s) (indices 0..{len(hosts) - 1})")
    return indices


def host_name(index: int, hosts: Sequence[str]) -> str:
    """The address of host ``index``, or ``controller`` for ``-1``."""
    return "controller" if index < 0 else str(hosts[index])


def next_live_host(placement: Sequence[int], attempt: int, hosts: Sequence[str]) -> int:
    """Where a service restarts a replica: its hosts in turn, skipping hosts declared dead."""
    live = [h for h in placement if h < 0 or hosts[h] not in HOSTS.dead]
    if not live:
        raise HostDiedError("every host of this service is down: " + "; ".join(
            HOSTS.dead[hosts[h]] for h in dict.fromkeys(placement)))
    return live[attempt % len(live)]


def check_store_pair(backend: str, trainer: str, trainer_hosts: Sequence[int], generator: str,
                     generator_hosts: Sequence[int], hosts: Sequence[str]) -> None:
    """``shm`` moves weights through this machine's shared memory: every replica of both actors
    must then be on one host. Raises ``ValueError`` naming both hosts otherwise."""
    if backend not in ("shm", "cuda_ipc"):
        return
    for t in trainer_hosts:
        for g in generator_hosts:
            if t != g:
                raise ValueError(
                    f"store.backend: {backend} needs {trainer} and {generator} on one host, but "
                    f"{trainer} is on {host_name(t, hosts)} and {generator} on {host_name(g, hosts)}; "
                    f"use store.backend: torchstore (or auto) to move weights across hosts")


# ------------------------------------------------------------------------------ the host mesh

class HostDiedError(RuntimeError):
    """A host agent stopped answering; names the host and the actors it carried."""


class _HostRegistry:
    """The controller's attachment to its hosts (one Monarch host mesh for the whole process),
    a liveness probe per host, and which actor meshes each host carries."""

    def __init__(self) -> None:
        self.addresses: tuple[HostAddress, ...] = ()
        self.mesh: Any = None
        self.dead: dict[HostAddress, str] = {}
        self.carried: dict[HostAddress, list[Any]] = {}
        self._lock = asyncio.Lock()
        self._watch: asyncio.Task[None] | None = None
        self.timeout_s = 30.0
        self.probe_interval_s = 1.0

    async def attach(self, addresses: Sequence[HostAddress], timeout_s: float) -> None:
        """Connect to ``addresses`` once per process; later calls must name the same hosts."""
        async with self._lock:
            if self.mesh is not None:
                if tuple(addresses) != self.addresses:
                    raise ValueError(f"runtime.hosts={list(addresses)} differs from the hosts this "
                                     f"controller already attached to: {list(self.addresses)}")
                return
            from monarch.actor import attach_to_workers

            mesh = attach_to_workers(ca="trust_all_connections", workers=[str(a) for a in addresses],
                                     name="forge_hosts")
            try:
                await asyncio.wait_for(_awaitable(mesh.initialized), timeout_s)
            except asyncio.TimeoutError:
                unreachable = [a for a in addresses if not await _probe(a, 1.0)]
                raise HostDiedError(f"could not attach to hosts within {timeout_s:g} s; not "
                                    f"answering: {unreachable or list(addresses)} (is "
                                    f"`forge-kernels worker --address ...` running there?)") from None
            self.addresses, self.mesh, self.timeout_s = tuple(addresses), mesh, timeout_s
            self._watch = asyncio.get_running_loop().create_task(self._probe_forever())

    def procs_on(self, index: int, procs: int) -> Any:
        """A new proc mesh of ``procs`` processes on host ``index``."""
        address = self.addresses[index]
        if address in self.dead:
            raise HostDiedError(f"host {address} is down ({self.dead[address]}); nothing more is "
                                f"placed on it")
        return self.mesh.slice(hosts=index).spawn_procs(per_host={"procs": procs})

    def carry(self, index: int, actor_mesh: Any) -> None:
        self.carried.setdefault(self.addresses[index], []).append(actor_mesh)

    def drop(self, actor_mesh: Any) -> None:
        for meshes in self.carried.values():
            if actor_mesh in meshes:
                meshes.remove(actor_mesh)

    async def _probe_forever(self) -> None:
        loop = asyncio.get_running_loop()
        last_ok = {a: loop.time() for a in self.addresses}
        while True:
            results = await asyncio.gather(*(_probe(a, self.probe_interval_s) for a in self.addresses))
            now = loop.time()
            for address, ok in zip(self.addresses, results):
                if ok:
                    last_ok[address] = now
                elif address not in self.dead and now - last_ok[address] >= min(self.timeout_s, 60.0):
                    self._host_died(address, f"its agent has not answered for {now - last_ok[address]:.0f} s")
            await asyncio.sleep(self.probe_interval_s)

    async def confirm_down(self, address: HostAddress, why: str) -> bool:
        """An actor process on ``address`` exited: if its agent is gone too, the host is dead."""
        if address in self.dead:
            return True
        if await _probe(address, 1.0):
            return False
        self._host_died(address, f"{why} and its agent does not answer")
        return True

    def _host_died(self, address: HostAddress, why: str) -> None:
        meshes = list(self.carried.get(address, []))
        actors = sorted({m.actor_class.__name__ for m in meshes})
        reason = f"host {address} died ({why}); it carried: {', '.join(actors) or 'no actors'}"
        self.dead[address] = reason
        log.error("%s", reason)
        for mesh in meshes:
            mesh.host_died(reason)

    async def close(self) -> None:
        """Stop probing and forget the attachment. The host mesh is not shut down: that would end
        the host agents, which outlive a run (the next run attaches again)."""
        if self._watch is not None:
            self._watch.cancel()
        self.__init__()  # type: ignore[misc]


async def _awaitable(value: Any) -> Any:
    return await value


async def _probe(address: HostAddress, timeout_s: float) -> bool:
    """True when the host agent's port accepts a TCP connection within ``timeout_s``."""
    port = int(_TCP.match(address).group("port"))  # type: ignore[union-attr]
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(address.hostname, port), timeout_s)
    except (OSError, asyncio.TimeoutError):
        return False
    writer.close()
    return True


HOSTS = _HostRegistry()

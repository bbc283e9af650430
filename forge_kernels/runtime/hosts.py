"""Hosts of a multi-host run: host agent addresses, hostfiles, per-actor placement lines and the
per-pair store check (shared memory only when trainer and generator share a host).

A host is a Monarch worker loop (``forge-kernels worker --address tcp://HOST:PORT``); the controller
attaches to the listed hosts with :func:`monarch.actor.attach_to_workers` and places each actor on
``runtime_overrides.<actor>.host`` (an index into ``runtime.hosts``, or a list of indices for the
replicas of a service).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

__all__ = [
    "HostAddress",
    "check_bind_allowed",
    "check_store_pair",
    "hosts_of",
    "parse_host",
    "placement_lines",
    "read_hostfile",
]

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


def hosts_of(actor: str, host: int | Sequence[int] | None, replicas: int,
             hosts: Sequence[HostAddress]) -> list[int]:
    """Host index of each replica of ``actor``: one index for all, or one per replica.

    With no ``runtime.hosts`` every actor runs on the controller's host (index ``-1``).
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


def _address(index: int, hosts: Sequence[HostAddress]) -> str:
    return "controller" if index < 0 else str(hosts[index])


def placement_lines(placements: Mapping[str, tuple[list[int], int, str | None]],
                    hosts: Sequence[HostAddress]) -> Iterator[str]:
    """One ``placement: <actor> -> <host address> procs=<n> devices=<...>`` line per actor.

    ``placements`` maps an actor name to (host index per replica, procs per replica, cuda_devices).
    """
    for actor, (indices, procs, devices) in placements.items():
        where = ",".join(_address(i, hosts) for i in indices)
        yield f"placement: {actor} -> {where} procs={procs} devices={devices or 'cpu'}"


def check_store_pair(backend: str, trainer: str, trainer_hosts: Sequence[int], generator: str,
                     generator_hosts: Sequence[int], hosts: Sequence[HostAddress]) -> None:
    """``shm`` moves weights through this machine's shared memory: every replica of both actors
    must then be on one host. Raises ``ValueError`` naming both hosts otherwise."""
    if backend != "shm":
        return
    for t in trainer_hosts:
        for g in generator_hosts:
            if t != g:
                raise ValueError(
                    f"store.backend: shm needs {trainer} and {generator} on one host, but {trainer} "
                    f"is on {_address(t, hosts)} and {generator} on {_address(g, hosts)}; use "
                    f"store.backend: torchstore to move weights across hosts")

"""Hosts of a multi-host run: addresses, hostfiles, placement lines, the shm-across-hosts check, and
a live cross-host actor call through a ``forge-kernels worker`` host agent on loopback."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time

import psutil
import pytest

from forge_kernels.cli import main as cli_main
from forge_kernels.config import StrictModel
from forge_kernels.runtime import Actor, endpoint, shutdown, spawn
from forge_kernels.runtime.hosts import check_store_pair, host_indices, parse_host, read_hostfile
from forge_kernels.runtime.placement import placement_lines
from forge_kernels.runtime.settings import RuntimeConfig
from forge_kernels.store import StoreConfig
from forge_kernels.store.selection import select_store


def test_host_addresses_and_hostfile(tmp_path):
    assert parse_host("tcp://127.0.0.1:26600").is_loopback
    assert not parse_host("tcp://node-7.cluster:26600").is_loopback
    for bad in ("127.0.0.1:26600", "tcp://h:0", "tcp://h:70000", "http://h:1"):
        with pytest.raises(ValueError, match="tcp://HOST:PORT"):
            parse_host(bad)
    f = tmp_path / "hosts"
    f.write_text("# the hosts\ntcp://127.0.0.1:1\n\ntcp://127.0.0.1:2  # second\n")
    assert read_hostfile(f) == ["tcp://127.0.0.1:1", "tcp://127.0.0.1:2"]
    f.write_text("tcp://ok:1\nnode:2\n")
    with pytest.raises(ValueError, match=r"hosts:2: .*'node:2'"):
        read_hostfile(f)


def test_host_indices_and_runtime_validation(tmp_path):
    hosts = [parse_host(f"tcp://127.0.0.1:{p}") for p in (1, 2, 3)]
    assert host_indices("generator", [1, 2], 2, hosts) == [1, 2]
    assert host_indices("trainer", None, 1, hosts) == [0] and host_indices("t", None, 2, []) == [-1, -1]
    with pytest.raises(ValueError, match=r"generator.host=3 is out of range"):
        host_indices("generator", 3, 1, hosts)
    with pytest.raises(ValueError, match="for 3 replicas"):
        host_indices("generator", [0, 1], 3, hosts)
    with pytest.raises(ValueError, match="needs backend: monarch"):
        RuntimeConfig(host=1, hosts=hosts)
    with pytest.raises(ValueError, match="out of range"):
        RuntimeConfig(backend="monarch", host=1)  # no hosts listed
    with pytest.raises(ValueError, match="'tcp://x'"):
        RuntimeConfig(backend="monarch", hosts=["tcp://x"])
    f = tmp_path / "hostfile"
    f.write_text("tcp://127.0.0.1:1\ntcp://127.0.0.1:2\n")
    rt = RuntimeConfig(backend="monarch", hostfile=str(f), host=[1, 0], replicas=2)
    assert rt.hosts == ["tcp://127.0.0.1:1", "tcp://127.0.0.1:2"] and rt.host_indices() == [1, 0]


def test_store_is_chosen_per_pair_and_shm_across_hosts_names_both_hosts():
    hosts = [parse_host("tcp://a:1"), parse_host("tcp://b:2")]
    check_store_pair("shm", "trainer", [0], "generator", [0], hosts)
    check_store_pair("torchstore", "trainer", [0], "generator", [1], hosts)
    with pytest.raises(ValueError, match=r"trainer is on tcp://a:1 and generator on tcp://b:2"):
        check_store_pair("shm", "trainer", [0], "generator", [1], hosts)
    on = {h: RuntimeConfig(backend="monarch", hosts=hosts, host=h) for h in (0, 1)}
    auto = StoreConfig(backend="auto")
    assert select_store(auto, ("trainer", on[0]), {"generator": on[0]}).backend == "shm"
    assert select_store(auto, ("trainer", on[0]), {"generator": on[1]}).backend == "torchstore"
    spanning = RuntimeConfig(backend="monarch", hosts=hosts, host=[0, 1], replicas=2)
    assert select_store(auto, ("trainer", on[0]), {"generator": spanning}).backend == "torchstore"
    assert select_store(auto, ("trainer", RuntimeConfig()), {"generator": RuntimeConfig()}).backend == "shm"
    with pytest.raises(ValueError, match=r"trainer is on tcp://a:1 and generator on tcp://b:2"):
        select_store(StoreConfig(backend="shm"), ("trainer", on[0]), {"generator": spanning})


def test_worker_refuses_non_loopback_without_bind_any(capsys):
    assert cli_main(["worker", "--address", "tcp://10.1.2.3:26600"]) == 2
    assert "--bind-any" in capsys.readouterr().err
    assert cli_main(["worker", "--address", "nonsense"]) == 2


# ---------------------------------------------------------------- live host agents on loopback

class Where(Actor):
    """Says which process it runs in."""

    class Config(StrictModel):
        tag: str = "x"

    @endpoint
    async def where(self) -> tuple[str, int, int]:
        return self.config.tag, os.getpid(), self.rank


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_agents(n: int) -> tuple[list[str], list[subprocess.Popen]]:
    """``n`` ``forge-kernels worker`` host agents on loopback; waits until each listens."""
    addresses = [f"tcp://127.0.0.1:{_free_port()}" for _ in range(n)]
    agents = [subprocess.Popen([sys.executable, "-m", "forge_kernels.cli", "worker", "--address", a],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
              for a in addresses]
    deadline = time.monotonic() + 60
    for address in addresses:
        port = int(address.rsplit(":", 1)[1])
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, f"host agent {address} did not start listening"
                time.sleep(0.2)
    return addresses, agents


def stop_agents(agents: list[subprocess.Popen]) -> None:
    for agent in agents:
        if agent.poll() is None:
            agent.terminate()
    for agent in agents:
        try:
            agent.wait(10)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait(10)


def descendants(agent: subprocess.Popen) -> set[int]:
    try:
        return {p.pid for p in psutil.Process(agent.pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def test_actors_run_on_the_host_their_placement_names():
    addresses, agents = start_agents(2)
    runtime = {"backend": "monarch", "hosts": addresses}

    async def main():
        try:
            trainer = await spawn(Where, {"tag": "t"}, runtime, procs=2, host=0)
            service = await spawn(Where, {"tag": "g"}, runtime, replicas=2, host=[1, 0])
            local = await spawn(Where, {"tag": "c"}, backend="monarch")
            ranks = [await trainer.at(r).where.call_one() for r in range(2)]
            replicas = [await r.mesh.at(0).where.call_one() for r in service.replicas]
            here = await local.at(0).where.call_one()
            under = [descendants(a) for a in agents]
            assert {pid for _, pid, _ in ranks} <= under[0] and len({p for _, p, _ in ranks}) == 2
            assert [r for _, _, r in ranks] == [0, 1]
            assert replicas[0][1] in under[1] and replicas[1][1] in under[0]
            assert here[1] not in under[0] | under[1]  # no host: the controller's host
            lines = list(placement_lines({
                "trainer": RuntimeConfig(**runtime, procs=2, host=0),
                "generator": RuntimeConfig(**runtime, replicas=2, host=[1, 0], cuda_devices="0"),
                "buffer": RuntimeConfig()}))
            assert lines == [f"placement: trainer -> {addresses[0]} procs=2 devices=cpu",
                             f"placement: generator -> {addresses[1]},{addresses[0]} procs=1 devices=0",
                             "placement: buffer -> local (controller process) procs=1 devices=cpu"]
        finally:
            await shutdown()
        assert descendants(agents[0]) | descendants(agents[1]) == set()  # stopped on every host

    try:
        asyncio.run(main())
    finally:
        stop_agents(agents)

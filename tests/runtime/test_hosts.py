"""Hosts of a multi-host run: addresses, hostfiles, placement lines, the shm-across-hosts check, and
a live cross-host actor call through a ``forge-kernels worker`` host agent on loopback."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from forge_kernels.cli import main as cli_main
from forge_kernels.runtime.hosts import (
    check_store_pair,
    hosts_of,
    parse_host,
    placement_lines,
    read_hostfile,
)
from forge_kernels.runtime.settings import RuntimeConfig


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


def test_placement_lines_and_replicas_spanning_hosts():
    hosts = [parse_host(f"tcp://127.0.0.1:{p}") for p in (1, 2, 3)]
    placements = {
        "trainer": (hosts_of("trainer", 0, 1, hosts), 2, None),
        "generator": (hosts_of("generator", [1, 2], 2, hosts), 1, "0"),
    }
    assert list(placement_lines(placements, hosts)) == [
        "placement: trainer -> tcp://127.0.0.1:1 procs=2 devices=cpu",
        "placement: generator -> tcp://127.0.0.1:2,tcp://127.0.0.1:3 procs=1 devices=0",
    ]
    with pytest.raises(ValueError, match=r"generator.host=3 is out of range"):
        hosts_of("generator", 3, 1, hosts)
    with pytest.raises(ValueError, match="for 3 replicas"):
        hosts_of("generator", [0, 1], 3, hosts)
    with pytest.raises(ValueError, match="needs backend: monarch"):
        RuntimeConfig(host=1)
    assert RuntimeConfig(backend="monarch", host=[1, 2]).host == [1, 2]


def test_shm_across_hosts_is_a_config_error_naming_both_hosts():
    hosts = [parse_host("tcp://a:1"), parse_host("tcp://b:2")]
    check_store_pair("shm", "trainer", [0], "generator", [0], hosts)
    check_store_pair("torchstore", "trainer", [0], "generator", [1], hosts)
    with pytest.raises(ValueError, match=r"trainer is on tcp://a:1 and generator on tcp://b:2"):
        check_store_pair("shm", "trainer", [0], "generator", [1], hosts)


def test_worker_refuses_non_loopback_without_bind_any(capsys):
    assert cli_main(["worker", "--address", "tcp://10.1.2.3:26600"]) == 2
    assert "--bind-any" in capsys.readouterr().err
    assert cli_main(["worker", "--address", "nonsense"]) == 2

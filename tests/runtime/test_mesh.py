"""Actor meshes on both backends: verbs, ordering, errors, argument isolation, config checks."""

from __future__ import annotations

import asyncio

import pytest
import torch

from forge_kernels.config import ConfigError
from forge_kernels.runtime import ActorCallError, ActorDiedError, RuntimeStoppedError, spawn


def test_call_call_one_and_broadcast(run, backend, actors):
    async def body():
        mesh = await spawn(actors.Counter, {"start": 10}, backend=backend, procs=2)
        try:
            who = await mesh.whoami.call()
            assert [w["rank"] for w in who] == [0, 1]
            assert all(w["size"] == 2 for w in who)
            if backend == "monarch":  # one process per rank
                assert who[0]["pid"] != who[1]["pid"]
            assert await mesh.add.call(1) == [11, 11]
            assert await mesh.at(1).add.call_one(5) == 16
            assert await mesh.get.call() == [11, 16]
            with pytest.raises(ValueError, match="has 2 ranks"):
                await mesh.get.call_one()
            mesh.add.broadcast(100)  # fire and forget, but ordered before the next call
            assert await mesh.get.call() == [111, 116]
        finally:
            await mesh.stop()

    run(body())


def test_calls_to_one_actor_run_one_at_a_time_in_order(run, backend, actors):
    async def body():
        mesh = await spawn(actors.Counter, backend=backend)
        try:
            results = await asyncio.gather(
                *(mesh.slow_append.call_one(i, 0.02) for i in range(4))
            )
            expected = [(tag, i) for i in range(4) for tag in ("start", "end")]
            assert results[-1] == expected  # no interleaving, arrival order kept
        finally:
            await mesh.stop()

    run(body())


def test_exception_carries_remote_traceback_and_names(run, backend, actors):
    async def body():
        mesh = await spawn(actors.Counter, backend=backend, procs=2)
        try:
            with pytest.raises(ActorCallError) as info:
                await mesh.at(1).fail.call_one("the disk is on fire")
            err = info.value
            assert (err.actor, err.endpoint, err.rank) == ("Counter[1]", "fail", 1)
            assert err.exc_type == "ValueError"
            assert "the disk is on fire" in str(err)
            assert "raise ValueError(message)" in err.remote_traceback  # the actor's source line
            assert "in fail" in err.remote_traceback
            assert await mesh.at(1).add.call_one(2) == 2  # the actor survives its exception
        finally:
            await mesh.stop()

    run(body())


def test_arguments_and_results_are_not_shared(run, backend, actors):
    async def body():
        mesh = await spawn(actors.Counter, backend=backend)
        try:
            x = torch.ones(4)
            y = await mesh.scale_in_place.call_one(x, 3.0)
            assert torch.equal(x, torch.ones(4))  # the actor scaled its own copy
            assert torch.equal(y, torch.full((4,), 3.0))
            y.zero_()  # the caller's result is not the actor's stored tensor
            assert await mesh.stored_sum.call_one() == 12.0
            big = torch.randn(256, 1024)  # 1 MiB both ways
            back = await mesh.scale_in_place.call_one(big, 2.0)
            assert torch.equal(back, big * 2)
        finally:
            await mesh.stop()

    run(body())


def test_dead_actor_fails_calls_instead_of_hanging(run, backend, actors, hard_crash):
    async def body():
        mesh = await spawn(actors.Counter, backend=backend)
        try:
            queued = [mesh.slow_append.call_one(i, 0.01) for i in range(3)]
            crash = mesh.crash.call_one(hard_crash)
            behind = mesh.get.call_one()  # queued behind the crash
            results = await asyncio.gather(*queued, crash, behind, return_exceptions=True)
            done = [r for r in results[:3] if isinstance(r, list)]
            # Calls before the crash return their results in order. On monarch, a reply the actor
            # computed right before os._exit may be lost in its unflushed send buffer: that call
            # then fails with ActorDiedError (never hangs, never gets a wrong answer).
            assert [len(r) for r in done] == [2, 4, 6][:len(done)] and len(done) >= (3 if backend == "local" else 1)
            assert all(isinstance(r, ActorDiedError) for r in results[len(done):3]), results
            assert all(isinstance(r, ActorDiedError) for r in results[3:]), results[3:]
            assert not mesh.is_alive()
            with pytest.raises(ActorDiedError, match="died"):
                await mesh.get.call_one()
        finally:
            await mesh.stop()
        with pytest.raises(RuntimeStoppedError):
            await mesh.get.call_one()

    run(body())


def test_unknown_endpoint_and_bad_configs_are_clear_errors(run, actors):
    async def body():
        with pytest.raises(ConfigError, match="strat"):
            await spawn(actors.Counter, {"strat": 1})
        with pytest.raises(ConfigError, match="backend"):
            await spawn(actors.Counter, backend="gpu")
        with pytest.raises(ConfigError, match="procs"):
            await spawn(actors.Counter, procs=0)
        mesh = await spawn(actors.Counter)
        with pytest.raises(AttributeError, match="no endpoint 'ad'.*add"):
            mesh.ad.call_one(1)
        await mesh.stop()

    run(body())


def test_cuda_devices_become_each_process_visible_devices(run, actors):
    """runtime.cuda_devices places an actor's processes on GPUs (checked through the env here)."""
    async def body():
        with pytest.raises(ConfigError, match="cuda_devices='1' needs backend: monarch"):
            await spawn(actors.Counter, cuda_devices="1")
        with pytest.raises(ConfigError, match="cuda_devices"):
            await spawn(actors.Counter, backend="monarch", cuda_devices="gpu1")
        mesh = await spawn(actors.Counter, backend="monarch", procs=2, cuda_devices="3,5")
        try:
            assert await mesh.visible_devices.call() == ["3,5", "3,5"]
        finally:
            await mesh.stop()

    run(body())


def test_process_killed_from_outside_is_detected(run, actors):
    """A monarch process killed by a signal (as by a segfault) fails its calls at once."""
    import os
    import signal

    async def body():
        mesh = await spawn(actors.Counter, backend="monarch", procs=2)
        try:
            pids = [w["pid"] for w in await mesh.whoami.call()]
            pending = mesh.at(1).slow_append.call_one("x", 30.0)
            waiting = asyncio.ensure_future(pending)
            await asyncio.sleep(0.2)
            os.kill(pids[1], signal.SIGSEGV)
            start = asyncio.get_running_loop().time()
            with pytest.raises(ActorDiedError, match=f"process {pids[1]} of rank 1 exited"):
                await waiting
            assert asyncio.get_running_loop().time() - start < 5.0  # not monarch's slow path
            with pytest.raises(ActorDiedError):
                await mesh.at(0).get.call_one()  # the mesh is dead as a whole
        finally:
            await mesh.stop()

    run(body())


def test_unimportable_actor_class_fails_clearly(run, monkeypatch):
    """A class whose module exists only in the controller cannot start in a monarch process."""
    import sys
    import types

    from forge_kernels.runtime import Actor, endpoint

    ghost = types.ModuleType("ghost_module_only_here")

    class Ghost(Actor):
        @endpoint
        async def ping(self) -> int:
            return 1

    Ghost.__module__, Ghost.__qualname__ = ghost.__name__, "Ghost"
    ghost.Ghost = Ghost
    monkeypatch.setitem(sys.modules, ghost.__name__, ghost)

    async def body():
        with pytest.raises(RuntimeError, match=r"(?s)could not start Ghost.*No module named 'ghost_module_only_here'.*importable"):
            await spawn(Ghost, backend="monarch", setup_timeout_s=60)

    run(body())

"""The red-team corpus (``corpus/``, one attack per file, its header naming the attack and the
expected verdict) through the embedded evaluator and through a real eval server on loopback; then
the checks that nothing was harmed: no canary on the host, no process, temp dir or cgroup left,
the zygote never replaced, the shipped solutions still passing."""

from __future__ import annotations

import asyncio
import glob
import json
import os
import tempfile
import time
from pathlib import Path

import psutil
import pytest
import torch

import forge_kernels
from forge_kernels.eval import EvalOptions, EvalResult, Evaluator, FaultClass
from forge_kernels.eval.service import EvalClient, LocalEvalServer
from forge_kernels.tasks import load_builtin_tasks
from tests.redteam.conftest import CORPUS, DEVICE, SECRET_VALUE, TASKS, header

pytestmark = pytest.mark.redteam
FILES = sorted(CORPUS.glob("*.py"))
BASE = EvalOptions(device=DEVICE, trials=2, timeout_s=60)
CANARIES = [Path(forge_kernels.__file__).parent / "redteam_canary", Path(torch.__file__).parent / "redteam_canary.pt"]
_JAILED_UID = 1_000_000
# made once by the trusted side (the zygote's inductor import, the server's per-GPU timing lock)
_EVALUATOR_OWN = ("torchinductor_", "forge-kernels-timing-")


def options_for(path: Path) -> EvalOptions:
    extra = header(path).get("Options")
    return BASE.model_copy(update=json.loads(extra)) if extra else BASE


def check(path: Path, r: EvalResult) -> None:
    """The verdict the file's header expects; never a candidate-caused internal_error."""
    h = header(path)
    expect = h["Expect"]
    what = f"{path.name}: {r.fault.value} {r.error!r:.600} {[x.flag.value for x in r.hacks]}"
    assert r.fault is not FaultClass.INTERNAL_ERROR, what
    if expect == "rejected":
        assert not r.correct, what
    elif expect.startswith("fault="):
        assert r.fault.value in expect.removeprefix("fault=").split("|") and not r.correct, what
    elif expect.startswith("flag="):
        assert expect.removeprefix("flag=") in {x.flag.value for x in r.hacks} and not r.correct, what
    else:
        assert expect in ("harmless", "residual"), f"{path.name}: unknown Expect {expect!r}"
    if h.get("Secret-not-in-error"):
        assert SECRET_VALUE not in (r.error or "") and "FORGE_REDTEAM" not in (r.error or ""), what
    if h.get("Max-wall-s"):
        assert r.wall_time_s < float(h["Max-wall-s"]), what


def jailed_processes() -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["uids"]):
        uids = p.info.get("uids")
        if uids is not None and uids.real >= _JAILED_UID:
            found.append(p)
    return found


def leftovers(before: set[str]) -> dict[str, object]:
    """What an evaluation could have left on the host."""
    deadline = time.monotonic() + 10
    while jailed_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    return {
        "canaries": [str(c) for c in CANARIES if c.exists()],
        "processes": [(p.pid, p.name()) for p in jailed_processes()],
        "temp dirs": sorted(name for name in set(os.listdir(tempfile.gettempdir())) - before
                            if not name.startswith(_EVALUATOR_OWN)),
        "cgroups": glob.glob("/sys/fs/cgroup/*/**/forge-eval-*", recursive=True)
        + glob.glob("/sys/fs/cgroup/**/forge-eval-*", recursive=True),
    }


def clean(found: dict[str, object]) -> bool:
    return not any(found.values())


@pytest.fixture(scope="module")
def temp_before() -> set[str]:
    return set(os.listdir(tempfile.gettempdir()))


def test_corpus_is_large_and_well_formed():
    assert len(FILES) >= 60
    for path in FILES:
        h = header(path)
        assert {"Attack", "Class", "Expect", "Task"} <= set(h), path.name
        assert h["Task"] in TASKS, path.name


def test_corpus_embedded(redteam_env, temp_before):
    failures = []
    with Evaluator(BASE) as ev:
        for path in FILES:
            r = ev.evaluate(TASKS[header(path)["Task"]], path.read_text(), options_for(path))
            try:
                check(path, r)
            except AssertionError as err:
                failures.append(str(err).splitlines()[0])
        zygote = ev.zygote(DEVICE)
        assert zygote.generation == 1, "a candidate killed the zygote"
        solution = load_builtin_tasks(names=["level1/relu"])[0]
        assert ev.evaluate(solution, solution.solution, BASE).correct, "the shipped solution fails after the corpus"
    assert not failures, "\n".join(failures)
    assert clean(found := leftovers(temp_before)), found


def test_corpus_through_server(redteam_env, temp_before):
    """One batch per options set, evaluated concurrently by two workers behind HTTP."""
    groups: dict[str, list[Path]] = {}
    for path in FILES:
        groups.setdefault(header(path).get("Options", ""), []).append(path)

    async def run(url: str) -> list[tuple[Path, EvalResult]]:
        results = []
        async with EvalClient(url, timeout_s=600) as client:
            for paths in groups.values():
                batch = await client.evaluate_batch([TASKS[header(p)["Task"]] for p in paths],
                                                    [p.read_text() for p in paths], options_for(paths[0]))
                results += list(zip(paths, batch))
            solution = load_builtin_tasks(names=["level1/relu"])[0]
            results.append((Path("solution"), await client.evaluate(solution, solution.solution, BASE)))
        return results

    with LocalEvalServer(devices=DEVICE if DEVICE == "cpu" else "0", workers=2, eval_deadline_s=120) as server:
        results = asyncio.run(asyncio.wait_for(run(server.url), 900))
        pid = server.process.pid if server.process else None
        assert pid is not None and psutil.pid_exists(pid), "a candidate killed the eval server"
    *corpus, (_, solution) = results
    failures = []
    for path, r in corpus:
        try:
            check(path, r)
        except AssertionError as err:
            failures.append(str(err).splitlines()[0])
    assert not failures, "\n".join(failures)
    assert solution.correct, solution.error
    assert clean(found := leftovers(temp_before)), found

"""The GRPO reward actor, spawned on the runtime, evaluates through the eval service's client."""

from __future__ import annotations

from actors.reward import RewardActor
from forge_kernels.runtime import shutdown, spawn
from forge_kernels.types import Completion


def evaluations(http) -> int:
    return sum(w["evaluations"] for w in http.get("/v1/workers").json())


def test_reward_actor_scores_through_the_service(server, http, relu, run):
    before = evaluations(http)
    wrong = relu.solution.replace("tl.maximum(x, 0.0)", "tl.minimum(x, 0.0)")
    assert wrong != relu.solution

    async def scenario():
        actor = await spawn(RewardActor, {"eval": {"mode": "service", "urls": [server.url],
                                                   "options": {"trials": 1, "alt_shape_trials": 0, "seed": 4242}}})  # uncached
        try:
            return await actor.score.call_one(relu, [Completion([1], [2], f"```python\n{s}\n```", [-0.5], 0)
                                                     for s in (relu.solution, wrong)])
        finally:
            await shutdown()

    good, bad = run(scenario())
    assert good.correct and good.reward == 1.0 and good.result.device.startswith("cpu")
    assert bad.compiled and not bad.correct and bad.summary()["fault"] == "output_value_mismatch"
    assert evaluations(http) - before == 2  # both were evaluated by the server's workers

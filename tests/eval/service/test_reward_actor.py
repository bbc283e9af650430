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
        eval_cfg = {"mode": "service", "urls": [server.url],
                    "options": {"trials": 1, "alt_shape_trials": 0, "seed": 4242}}  # uncached
        actor = await spawn(RewardActor, {"env": {"name": "triton", "config": {"eval": eval_cfg}}})
        try:
            return await actor.score.call_one(relu, [Completion([1], [2], f"```python\n{s}\n```", [-0.5], 0)
                                                     for s in (relu.solution, wrong)])
        finally:
            await shutdown()

    good, bad = run(scenario())
    assert good.info["correct"] and good.reward == 1.0 and good.info["device"].startswith("cpu")
    assert bad.info["compiled"] and not bad.info["correct"] and bad.info["fault"] == "output_value_mismatch"
    assert evaluations(http) - before == 2  # both were evaluated by the server's workers

"""Selecting losses by name from YAML, config errors, and user registration."""

from __future__ import annotations

from typing import ClassVar

import pytest
import torch
from pydantic import Field

from forge_kernels.config import ConfigError, StrictModel, load_config, to_yaml
from losses import GRPOLoss, GSPOLoss, LossSpec, PolicyLoss, build_loss, loss_names, register_loss
from losses.guards import MRSGuard
from losses.ops import masked_mean


class TrainerSection(StrictModel):
    loss: LossSpec = Field(default_factory=GRPOLoss)


def test_builtin_names():
    assert {"grpo", "gspo", "trloo", "dapo", "cispo"} <= set(loss_names())


def test_yaml_selects_and_validates_a_loss(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("loss:\n  name: gspo\n  clip_low: 0.001\n  guards:\n    - {name: mrs, upper: 1.01}\n")
    cfg = load_config(TrainerSection, path, ["loss.beta=0.05"])
    assert isinstance(cfg.loss, GSPOLoss)
    assert cfg.loss.clip_low == 0.001 and cfg.loss.beta == 0.05
    assert cfg.loss.guards == [MRSGuard(upper=1.01)]
    dumped = to_yaml(cfg)
    assert "name: gspo" in dumped
    assert load_config(TrainerSection, base=cfg.model_dump(mode="json")) == cfg  # round trip
    assert isinstance(TrainerSection().loss, GRPOLoss)


def test_unknown_name_and_bad_field_errors_name_the_problem(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown loss 'gpso' \(did you mean '(gspo|grpo)'\?\); registered: .*grpo, gspo"):
        load_config(TrainerSection, base={"loss": {"name": "gpso"}})
    with pytest.raises(ConfigError, match=r"clip_low.*greater than or equal to 0.*-0.1"):
        load_config(TrainerSection, base={"loss": {"name": "grpo", "clip_low": -0.1}})
    with pytest.raises(ConfigError, match=r"clip_hgh: unknown key; did you mean 'clip_high'"):
        build_loss({"name": "dapo", "clip_hgh": 0.3})
    with pytest.raises(ConfigError, match="needs a 'name' key"):
        build_loss({"clip_low": 0.2})
    with pytest.raises(ConfigError, match="guards"):
        build_loss({"name": "grpo", "guards": [{"name": "prs"}]})  # PRS acts on samples, not tokens


def test_user_registered_loss_is_selectable():
    @register_loss("test_reinforce")
    class Reinforce(PolicyLoss):
        advantage_estimator: ClassVar[str] = "rloo"
        baseline: float = Field(0.0, description="subtracted from every advantage")

        def policy_objective(self, logprobs, old_logprobs, advantages, mask):
            loss = -(advantages - self.baseline) * logprobs
            return loss, {"loss/pg_mean": masked_mean(loss.detach(), mask)}

    loss = build_loss({"name": "test_reinforce", "baseline": 1.0})
    assert isinstance(loss, Reinforce) and loss.loss_name == "test_reinforce"
    logits = torch.zeros(1, 2, 2, requires_grad=True)
    zeros = torch.zeros(1, 2)
    out = loss(logits, torch.zeros(1, 2, dtype=torch.long), torch.ones(1, 2), zeros, zeros)
    assert out.loss.item() == pytest.approx(-torch.log(torch.tensor(2.0)).item())  # -(0-1)*(-ln2)
    assert "loss/pg_mean" in out.metrics


def test_registration_errors():
    with pytest.raises(TypeError, match="PolicyLoss subclass"):
        register_loss("nope")(dict)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="loss 'grpo' is already registered \\(by GRPOLoss\\)"):

        @register_loss("grpo")
        class Other(GRPOLoss):
            pass

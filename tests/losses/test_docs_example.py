"""The loss-composition example of docs/losses.md ("A new loss in 15 lines") runs as written (so the docs stay true)."""

from __future__ import annotations

import re
from pathlib import Path

import torch
import yaml
from pydantic import Field

from forge_kernels.config import StrictModel, load_config
from losses import GRPOLoss, LossSpec
from losses.guards import MRSGuard

DOC = Path(__file__).resolve().parents[2] / "docs" / "losses.md"


def _blocks(language: str) -> list[str]:
    section = DOC.read_text().split("\n## A new loss in 15 lines\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


class AppConfig(StrictModel):
    loss: LossSpec = Field(default_factory=GRPOLoss)


def test_docs_snippet_defines_registers_and_selects_a_loss(tmp_path):
    (python_src,) = _blocks("python")
    (yaml_src,) = _blocks("yaml")
    namespace: dict = {}
    exec(compile(python_src, str(DOC), "exec"), namespace)
    cls = namespace["SeqCISPOLoss"]

    path = tmp_path / "app.yaml"
    path.write_text(yaml_src)
    cfg = load_config(AppConfig, path)
    loss = cfg.loss
    assert type(loss) is cls and loss.loss_name == "seq_cispo"
    assert loss.clip_high == 1.5 and loss.beta == 0.01 and loss.guards == [MRSGuard(lower=0.99, upper=1.01)]
    assert yaml.safe_load(yaml_src)["loss"]["name"] == "seq_cispo"

    # and it trains: sequence ratios 1 (generator == trainer), so loss = -A * logp token by token
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 5, (2, 3))
    logp = torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1).detach()
    adv = torch.tensor([[1.0] * 3, [-1.0] * 3], dtype=torch.float64)
    ref = logp.clone()
    out = loss(logits, targets, torch.ones(2, 3), adv, logp, ref)
    expected = (-adv * logp).mean(-1).mean()  # ref KL is 0 at ref == logp
    assert torch.allclose(out.loss, expected)
    assert out.metrics["guard/mrs_rejection_rate"].item() == 0.0
    out.loss.backward()
    assert logits.grad.abs().sum() > 0

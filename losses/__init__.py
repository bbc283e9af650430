"""Losses for RL post-training: shared ops, one class per variant, advantage estimators, guards.

Select a loss by name (``build_loss({"name": "gspo", "clip_low": 3e-4})`` or a :data:`LossSpec`
config field) or instantiate a class directly; add your own with ``@register_loss("mine")``.
"""

from losses.base import LossOutput, PolicyLoss
from losses.registry import LossSpec, build_loss, dump_loss, get_loss_class, loss_names, register_loss

# built-in losses register themselves on import
from losses.grpo import GRPOLoss  # noqa: E402  (after the registry)
from losses.gspo import GSPOLoss  # noqa: E402
from losses.dapo import DAPOLoss  # noqa: E402
from losses.trloo import TRLOOLoss  # noqa: E402
from losses.cispo import CISPOLoss  # noqa: E402

__all__ = [
    "CISPOLoss",
    "DAPOLoss",
    "GRPOLoss",
    "GSPOLoss",
    "LossOutput",
    "LossSpec",
    "PolicyLoss",
    "TRLOOLoss",
    "build_loss",
    "dump_loss",
    "get_loss_class",
    "loss_names",
    "register_loss",
]

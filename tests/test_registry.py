"""The one registry helper: names, import paths, near misses, checks — for every registered kind."""

from __future__ import annotations

import pytest

from forge_kernels.env.base import Environment, environment_class
from forge_kernels.env.rewards import REWARDS, RewardConfig, kevin_reward
from forge_kernels.registry import Registry, import_object, resolve_class
from losses.registry import get_loss_class


def test_registry_names_import_paths_near_misses_and_checks():
    things: Registry[int] = Registry("thing", check=lambda x: None if isinstance(x, int) else f"{x!r} is not an int")
    things.register("seven")(7)
    assert things.get("seven") == 7 and things.names() == ["seven"] and "seven" in things
    with pytest.raises(ValueError, match=r"unknown thing 'sevn' \(did you mean 'seven'\?\); registered: seven"):
        things.get("sevn")
    with pytest.raises(ValueError, match=r"unknown thing 'zzz'; registered: seven"):
        things.get("zzz")
    with pytest.raises(TypeError, match="cannot register thing 'x': 'x' is not an int"):
        things.register("x")("x")
    with pytest.raises(ValueError, match="already registered"):
        things.register("seven")(8)
    with pytest.raises(ValueError, match=r"thing.name='math:pi': 3.14.* is not an int"):  # import paths are checked too
        things.get("math:pi", "thing.name")
    assert things.get("stat:ST_MODE", "thing.name") == 0  # an int found by import path


def test_import_paths_name_the_setting_and_the_problem():
    assert import_object("collections:OrderedDict", "x") is __import__("collections").OrderedDict
    with pytest.raises(ValueError, match=r"x='collections': expected 'package.module:Name'"):
        import_object("collections", "x")
    with pytest.raises(ValueError, match=r"x='nope_module:Thing': cannot import 'Thing' from module 'nope_module'"):
        import_object("nope_module:Thing", "x")
    with pytest.raises(ValueError, match=r"actor_classes.t='collections:OrderedDict' is .* not a subclass of Environment"):
        resolve_class("collections:OrderedDict", "actor_classes.t", Environment)


def test_every_kind_uses_it():
    with pytest.raises(ValueError, match=r"unknown environment 'triton2' \(did you mean 'triton'\?\)"):
        environment_class("triton2")
    assert environment_class("examples.reverse_env:ReverseWordEnv").__name__ == "ReverseWordEnv"
    with pytest.raises(ValueError, match=r"unknown reward 'kernelgm' \(did you mean 'kernelgym'\?\)"):
        RewardConfig(name="kernelgm")
    kevin = RewardConfig(name="forge_kernels.env.rewards:kevin_reward")
    with pytest.raises(ValueError, match=r"unknown loss 'gspoo' \(did you mean 'gspo'\?\)"):
        get_loss_class("gspoo")
    assert REWARDS.get(kevin.name) is kevin_reward  # compute_reward resolves the same path

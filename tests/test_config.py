"""Config loading: YAML + interpolation + overrides + deletion + validation messages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Literal

import pytest
from pydantic import Field

from forge_kernels.config import ConfigError, StrictModel, load_config, run_app, to_yaml

ROOT = Path(__file__).resolve().parents[1]


class Optim(StrictModel):
    lr: float = Field(gt=0)
    warmup: int = 0


class Trainer(StrictModel):
    optim: Optim
    steps: int = 10
    mode: Literal["sync", "async"] = "async"


class AppConfig(StrictModel):
    name: str = "run"
    trainer: Trainer
    tags: list[str] = []


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    return path


def test_load_with_interpolation_and_env(tmp_path, monkeypatch):
    monkeypatch.setenv("FK_TEST_NAME", "from-env")
    path = write(tmp_path, """
name: ${oc.env:FK_TEST_NAME}
trainer:
  optim: {lr: 0.001, warmup: 5}
  steps: ${trainer.optim.warmup}
""")
    cfg = load_config(AppConfig, path)
    assert cfg.name == "from-env"
    assert cfg.trainer.steps == 5
    assert cfg.trainer.optim.lr == pytest.approx(1e-3)


def test_overrides_typed_added_and_deleted(tmp_path):
    path = write(tmp_path, "trainer: {optim: {lr: 0.1, warmup: 3}, steps: 2}\ntags: [a, b]\n")
    cfg = load_config(
        AppConfig, path, ["trainer.steps=7", "trainer.mode=sync", "~trainer.optim.warmup", "tags=[x]"]
    )
    assert cfg.trainer.steps == 7 and isinstance(cfg.trainer.steps, int)
    assert cfg.trainer.mode == "sync"
    assert cfg.trainer.optim.warmup == 0  # deleted -> default
    assert cfg.tags == ["x"]
    # interpolation sees overrides, since they are applied before resolution
    cfg2 = load_config(AppConfig, path, ["name=run-${trainer.steps}"])
    assert cfg2.name == "run-2"


def test_delete_list_element(tmp_path):
    path = write(tmp_path, "trainer: {optim: {lr: 0.1}}\ntags: [a, b, c]\n")
    assert load_config(AppConfig, path, ["~tags.1"]).tags == ["a", "c"]


def test_typo_names_path_and_suggests_closest_key(tmp_path):
    path = write(tmp_path, "trainer: {optim: {lr: 0.1}}\n")
    with pytest.raises(ConfigError) as err:
        load_config(AppConfig, path, ["trainer.optim.wramup=3"])
    msg = str(err.value)
    assert "trainer.optim.wramup: unknown key" in msg
    assert "did you mean 'trainer.optim.warmup'" in msg


def test_typo_inside_a_list_of_tagged_union_members_names_that_members_keys(tmp_path):
    """``metrics.backends[i]`` is a discriminated union: the hint lists the chosen member's keys."""
    from forge_kernels.metrics import MetricsConfig

    class WithMetrics(StrictModel):
        metrics: MetricsConfig

    path = write(tmp_path, "metrics: {backends: [{type: console}, {type: tensorboard, log_dir: tb}]}\n")
    with pytest.raises(ConfigError) as err:
        load_config(WithMetrics, path)
    msg = str(err.value)
    assert "metrics.backends.1.tensorboard.log_dir: unknown key" in msg
    assert "did you mean 'metrics.backends.1.tensorboard.logdir'" in msg and "(valid keys here: logdir, type)" in msg


def test_wrong_type_names_path_value_and_expected_type(tmp_path):
    path = write(tmp_path, "trainer: {optim: {lr: 0.1}}\n")
    with pytest.raises(ConfigError) as err:
        load_config(AppConfig, path, ["trainer.optim.lr=oops", "trainer.mode=batch"])
    msg = str(err.value)
    assert "trainer.optim.lr" in msg and "'oops'" in msg and "expected float" in msg
    assert "trainer.mode" in msg and "'batch'" in msg and "'sync' or 'async'" in msg
    with pytest.raises(ConfigError, match=r"trainer\.optim\.lr: Input should be greater than 0"):
        load_config(AppConfig, path, ["trainer.optim.lr=-1"])


def test_missing_required_key_and_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="trainer: required key is missing"):
        load_config(AppConfig, write(tmp_path, "name: x\n"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(AppConfig, tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(AppConfig, write(tmp_path, "trainer: [unclosed\n"))
    with pytest.raises(ConfigError, match="is not of the form"):
        load_config(AppConfig, write(tmp_path, "trainer: {optim: {lr: 1}}\n"), ["trainer.steps"])
    with pytest.raises(ConfigError, match="cannot delete 'trainer.nothing'"):
        load_config(AppConfig, write(tmp_path, "trainer: {optim: {lr: 1}}\n"), ["~trainer.nothing"])


def test_run_app_prints_config_and_exits_2_on_error(tmp_path, capsys):
    path = write(tmp_path, "trainer: {optim: {lr: 0.5}}\n")
    assert run_app(AppConfig, lambda c: c.trainer.optim.lr, ["--config", str(path)]) == 0.5
    run_app(AppConfig, lambda c: None, ["--config", str(path), "--print-config", "trainer.steps=3"])
    out = capsys.readouterr().out
    assert "steps: 3" in out and out == to_yaml(load_config(AppConfig, path, ["trainer.steps=3"]))
    with pytest.raises(SystemExit) as exit_info:
        run_app(AppConfig, lambda c: None, ["--config", str(path), "trainer.optim.lr=oops"])
    assert exit_info.value.code == 2
    assert "trainer.optim.lr" in capsys.readouterr().err


def test_app_cli_rejects_bad_trainer_lr():
    """The issue's acceptance: a real app exits non-zero naming trainer.lr and its type."""
    proc = subprocess.run(
        [sys.executable, "-m", "apps.smoke.main", "--config", "configs/smoke.yaml", "trainer.lr=oops"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert "trainer.lr" in proc.stderr and "expected float" in proc.stderr


def test_run_to_exit_maps_how_an_app_ends_to_exit_statuses(capsys):
    from forge_kernels.config import run_to_exit

    class AppFailed(RuntimeError):
        pass

    async def ends_with(exc: BaseException | None):
        if exc is not None:
            raise exc
        return "report"

    assert run_to_exit(ends_with(None), AppFailed) == "report"
    for exc, status, message in [(ConfigError("env.config.tasks: none"), 2, "config error: env.config.tasks: none"),
                                 (AppFailed("trainer died"), 1, "error: trainer died"),
                                 (KeyboardInterrupt(), 130, "stopped, run kept")]:
        with pytest.raises(SystemExit) as exit_info:
            run_to_exit(ends_with(exc), AppFailed, interrupted="stopped, run kept")
        assert exit_info.value.code == status
        assert capsys.readouterr().err.strip() == message
    with pytest.raises(ValueError):  # anything else is a bug: it propagates with its traceback
        run_to_exit(ends_with(ValueError("bug")), AppFailed)

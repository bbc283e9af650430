"""Static checks of reference/solution sources and shape overrides."""

from __future__ import annotations

import pytest

from forge_kernels.tasks.source_check import (
    TaskFormatError,
    apply_shape_overrides,
    check_reference_source,
    check_solution_source,
)

REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


batch_size = 16
dim = (
    1024
)
hidden = dim * 4


def get_inputs():
    return [torch.randn(batch_size, hidden)]


def get_init_inputs():
    return []
'''


def test_valid_reference_passes() -> None:
    check_reference_source(REFERENCE, "ok.py")


def test_syntax_error_names_file_and_line() -> None:
    broken = REFERENCE.replace("return x * 2", "return x *")
    with pytest.raises(TaskFormatError, match=r"bad\.py: syntax error at line 7"):
        check_reference_source(broken, "bad.py")


@pytest.mark.parametrize(("needle", "missing"), [
    ("class Model(", "class Model"),
    ("def get_inputs(", "get_inputs()"),
    ("def get_init_inputs(", "get_init_inputs()"),
])
def test_missing_definitions_are_named(needle: str, missing: str) -> None:
    renamed = REFERENCE.replace(needle, needle.replace("(", "Other("))
    with pytest.raises(TaskFormatError, match=rf"x\.py: reference module does not define {missing}"):
        check_reference_source(renamed, "x.py")


def test_definitions_must_be_top_level() -> None:
    nested = REFERENCE.replace("def get_inputs():", "if True:\n  def get_inputs():")
    nested = nested.replace("\n    return [torch.randn(batch_size, hidden)]", "\n    return [torch.randn(1)]")
    with pytest.raises(TaskFormatError, match="get_inputs"):
        check_reference_source(nested, "x.py")


def test_empty_file_is_rejected() -> None:
    with pytest.raises(TaskFormatError, match="empty.py: file is empty"):
        check_reference_source("  \n", "empty.py")


def test_solution_must_define_model_new() -> None:
    check_solution_source("class ModelNew:\n    pass\n", "s.py")
    with pytest.raises(TaskFormatError, match="s.py: solution does not define class ModelNew"):
        check_solution_source("class Model:\n    pass\n", "s.py")


def test_overrides_replace_values_and_derived_globals_follow() -> None:
    out = apply_shape_overrides(REFERENCE, {"batch_size": 3, "dim": 10})
    namespace: dict = {}
    exec(compile(out, "t.py", "exec"), namespace)  # noqa: S102 - our own fixture text
    assert namespace["batch_size"] == 3 and namespace["dim"] == 10 and namespace["hidden"] == 40
    assert namespace["get_inputs"]()[0].shape == (3, 40)


def test_overrides_keep_line_numbers() -> None:
    out = apply_shape_overrides(REFERENCE, {"dim": 7})
    assert len(out.splitlines()) == len(REFERENCE.splitlines())
    assert out.splitlines()[20] == REFERENCE.splitlines()[20]


def test_override_of_unknown_name_is_an_error() -> None:
    with pytest.raises(TaskFormatError, match=r"t\.py: shape override\(s\) \['seq_len'\].*batch_size"):
        apply_shape_overrides(REFERENCE, {"seq_len": 4}, "t.py")


def test_override_value_must_be_a_number() -> None:
    with pytest.raises(TaskFormatError, match="dim=True must be an int or float"):
        apply_shape_overrides(REFERENCE, {"dim": True})


def test_no_overrides_returns_source_unchanged() -> None:
    assert apply_shape_overrides(REFERENCE, {}) is REFERENCE

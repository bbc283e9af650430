"""KernelBook-style SFT rows from JSON, JSONL, Parquet and folders."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from forge_kernels.tasks.kernelbook import load_kernelbook
from forge_kernels.tasks.source_check import TaskFormatError

PYTHON_CODE = '''import torch
import torch.nn as nn


class SumAggregator(nn.Module):
    def forward(self, x):
        return torch.sum(x, dim=1)


def get_inputs():
    return [torch.rand([4, 4, 4, 4])]


def get_init_inputs():
    return [[], {}]
'''
TRITON_CODE = '''import torch
import triton
import triton.language as tl


class SumAggregatorNew(torch.nn.Module):
    def forward(self, x):
        return x
'''


def _row(**changes: object) -> dict:
    return {"python_code": PYTHON_CODE, "triton_code": TRITON_CODE, "entry_point": "SumAggregator", **changes}


def test_jsonl_rows_become_examples(tmp_path: Path) -> None:
    path = tmp_path / "book.jsonl"
    path.write_text("\n".join(json.dumps(_row(uuid=i)) for i in range(3)) + "\n\n")
    examples = load_kernelbook(path)
    assert [e.name for e in examples] == ["book/0", "book/1", "book/2"]
    assert examples[0].new_class == "SumAggregatorNew"
    assert examples[0].python_code == PYTHON_CODE and examples[0].triton_code == TRITON_CODE
    assert examples[1].origin == f"{path}:row 1"


def test_json_list_and_parquet_and_folder(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps([_row(), _row()]))
    table = pa.Table.from_pylist([_row(uuid=7, extra="x")])
    pq.write_table(table, tmp_path / "b.parquet")
    (tmp_path / "readme.md").write_text("ignored")
    assert [e.name for e in load_kernelbook(tmp_path / "b.parquet")] == ["b/7"]
    assert [e.name for e in load_kernelbook(tmp_path)] == ["a/0", "a/1", "b/7"]
    assert len(load_kernelbook(tmp_path, limit=2)) == 2


@pytest.mark.parametrize(("row", "needle"), [
    (_row(entry_point=""), r"missing or empty field\(s\) \['entry_point'\]"),
    ({"python_code": PYTHON_CODE}, r"\['triton_code', 'entry_point'\]"),
    (_row(entry_point="Other"), "python_code: reference module does not define class Other"),
    (_row(triton_code="def f(:\n"), "triton_code: syntax error at line 1"),
    (["not", "an", "object"], "expected an object"),
])
def test_bad_rows_name_file_row_and_problem(tmp_path: Path, row: object, needle: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(_row()) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(TaskFormatError, match=rf"bad\.jsonl:row 1.*{needle}"):
        load_kernelbook(path)


def test_skip_invalid_keeps_good_rows_and_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (_row(), _row(entry_point="Nope"), _row())))
    with caplog.at_level(logging.WARNING):
        examples = load_kernelbook(path, skip_invalid=True)
    assert [e.name for e in examples] == ["mixed/0", "mixed/2"]
    assert "skipped 1 malformed" in caplog.text


def test_malformed_files_are_named(tmp_path: Path) -> None:
    (tmp_path / "x.jsonl").write_text(json.dumps(_row()) + "\n{oops\n")
    with pytest.raises(TaskFormatError, match=r"x\.jsonl: invalid JSON on line 2"):
        load_kernelbook(tmp_path / "x.jsonl")
    (tmp_path / "y.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(TaskFormatError, match=r"y\.json: expected a JSON list"):
        load_kernelbook(tmp_path / "y.json")
    pq.write_table(pa.Table.from_pylist([{"code": "x"}]), tmp_path / "z.parquet")
    with pytest.raises(TaskFormatError, match=r"z\.parquet: Parquet file lacks column\(s\)"):
        load_kernelbook(tmp_path / "z.parquet")
    (tmp_path / "w.parquet").write_text("not parquet")
    with pytest.raises(TaskFormatError, match=r"w\.parquet: not a readable Parquet file"):
        load_kernelbook(tmp_path / "w.parquet")
    with pytest.raises(TaskFormatError, match=r"unsupported file type '\.csv'"):
        (tmp_path / "v.csv").write_text("a,b")
        load_kernelbook(tmp_path / "v.csv")
    with pytest.raises(TaskFormatError, match="no such file"):
        load_kernelbook(tmp_path / "missing.jsonl")

"""Demo plot: reads a metrics JSONL, writes a PNG, prints a table; clear errors for bad input."""

from __future__ import annotations

import json

import pytest

from apps.demo.plot import DEFAULT_KEY, format_table, main, read_series


def write_metrics(path, values, key=DEFAULT_KEY):
    lines = [json.dumps({"step": i, "time": 0.0, key: v, "loss/total/mean": 0.1}) for i, v in enumerate(values)]
    lines.insert(1, json.dumps({"step": 99, "perf/step_s/mean": 1.0}))  # a record without the key
    path.write_text("\n".join(lines) + "\n")


def test_plot_writes_png_and_table(tmp_path, capsys):
    metrics = tmp_path / "metrics.jsonl"
    write_metrics(metrics, [0.1, 0.2, 0.25, 0.5])
    out = main([str(metrics), "--out", str(tmp_path / "r.png")])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000
    printed = capsys.readouterr().out
    assert "first 0.100  last 0.500  best 0.500 (step 3)  steps 4" in printed
    assert read_series(metrics) == [(0, 0.1), (1, 0.2), (2, 0.25), (3, 0.5)]


def test_table_bins_long_runs():
    series = [(i, i / 100) for i in range(100)]
    table = format_table(series, "k", rows=10).splitlines()
    assert len(table) == 12 and table[1].split()[:2] == ["0-9", "0.045"]


def test_missing_key_and_file_are_named(tmp_path):
    metrics = tmp_path / "m.jsonl"
    write_metrics(metrics, [0.1], key="reward/correct/max")
    with pytest.raises(KeyError, match="reward/correct/max"):
        read_series(metrics)
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        read_series(tmp_path / "nope.jsonl")
    metrics.write_text("{not json\n")
    with pytest.raises(ValueError, match=r"m.jsonl:1"):
        read_series(metrics)

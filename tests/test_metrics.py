"""Reducers (including exact merging of partial states) and the three backends."""

from __future__ import annotations

import io
import json
import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_kernels.metrics import (
    ConsoleBackend,
    JsonlBackend,
    MetricCollector,
    MetricLogger,
    MetricsConfig,
    Reduce,
    ReducerState,
    TensorBoardBackend,
    reduce_states,
)

VALUES = [3.0, -1.0, 4.0, 1.5, 9.0, 2.0]


@pytest.mark.parametrize(
    "reduce, expected",
    [
        (Reduce.MEAN, statistics.fmean(VALUES)),
        (Reduce.SUM, sum(VALUES)),
        (Reduce.MIN, -1.0),
        (Reduce.MAX, 9.0),
        (Reduce.STD, statistics.pstdev(VALUES)),
    ],
)
def test_each_reducer(reduce, expected):
    state = ReducerState(reduce)
    for v in VALUES:
        state.add(v)
    assert state.result() == pytest.approx(expected)


def test_histogram_keeps_values_and_empty_state_is_nan():
    state = ReducerState(Reduce.HISTOGRAM)
    for v in VALUES:
        state.add(v)
    assert state.result() == VALUES
    assert math.isnan(ReducerState(Reduce.MEAN).result())


finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(finite, max_size=8), min_size=1, max_size=5), st.sampled_from(list(Reduce)))
def test_merging_partial_states_equals_one_state(parts, reduce):
    whole = ReducerState(reduce)
    merged = ReducerState(reduce)
    for part in parts:
        partial = ReducerState(reduce)
        for v in part:
            partial.add(v)
            whole.add(v)
        merged.merge(partial)
    assert merged.count == whole.count
    a, b = merged.result(), whole.result()
    if reduce is Reduce.HISTOGRAM:
        assert sorted(a) == sorted(b)
    elif whole.count == 0:
        assert math.isnan(a) and math.isnan(b)
    else:
        assert a == pytest.approx(b, rel=1e-9, abs=1e-6)


def test_merge_rejects_mismatched_reducers():
    with pytest.raises(ValueError, match="cannot merge a 'sum' reducer into a 'mean' one"):
        ReducerState(Reduce.MEAN).merge(ReducerState(Reduce.SUM, count=1))
    collector = MetricCollector()
    collector.record("a/b", 1.0, Reduce.MEAN)
    with pytest.raises(ValueError, match="recorded with reduce='mean' and now with reduce='max'"):
        collector.record("a/b", 2.0, Reduce.MAX)


def test_collector_drain_resets_and_names_keys():
    c = MetricCollector()
    c.record("reward/correct", 1.0)
    c.record("reward/correct", 0.0)
    c.record("loss/tokens", 5, Reduce.SUM)
    c.record("reward/dist", 0.5, Reduce.HISTOGRAM)
    scalars, hists = reduce_states(c.drain())
    assert scalars == {"loss/tokens/sum": 5.0, "reward/correct/mean": 0.5}
    assert hists == {"reward/dist/hist": [0.5]}
    assert len(c) == 0


def test_logger_merges_remote_states_exactly(tmp_path):
    local, remote_a, remote_b = MetricCollector(), MetricCollector(), MetricCollector()
    local.record("x/v", 1.0, Reduce.STD)
    remote_a.record("x/v", 2.0, Reduce.STD)
    remote_b.record("x/v", 6.0, Reduce.STD)
    remote_b.record("x/n", 3, Reduce.SUM)
    logger = MetricLogger([JsonlBackend(tmp_path / "m.jsonl")], collector=local)
    scalars = logger.flush(0, [remote_a.drain(), remote_b.drain()])
    logger.close()
    assert scalars["x/v/std"] == pytest.approx(statistics.pstdev([1.0, 2.0, 6.0]))
    assert scalars["x/n/sum"] == 3.0


def test_console_backend_line_and_progress():
    out = io.StringIO()
    backend = ConsoleBackend(keys=["reward/mean", "missing"], total_steps=10, stream=out)
    backend.write(2, {"reward/mean": 0.25, "other/mean": 1.0}, {})
    line = out.getvalue().strip()
    assert line.startswith("[3/10 eta")
    assert line.endswith("| reward/mean 0.25")


def test_jsonl_backend_one_object_per_step(tmp_path):
    path = tmp_path / "sub" / "metrics.jsonl"
    backend = JsonlBackend(path)
    backend.write(0, {"a/mean": 1.0, "b/mean": math.nan}, {"h/hist": [1.0, 2.0]})
    backend.write(1, {"a/mean": 2.0}, {})
    backend.close()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    assert rows[0]["a/mean"] == 1.0 and rows[0]["b/mean"] is None
    assert rows[0]["h/hist"] == [1.0, 2.0] and rows[1]["a/mean"] == 2.0

    # a new run starts the file afresh (a rerun's plot must not mix runs); append keeps the old rows
    rerun = JsonlBackend(path)
    rerun.write(0, {"a/mean": 3.0}, {})
    rerun.close()
    assert [json.loads(line)["a/mean"] for line in path.read_text().splitlines()] == [3.0]
    resumed = JsonlBackend(path, append=True)
    resumed.write(1, {"a/mean": 4.0}, {})
    resumed.close()
    assert [json.loads(line)["a/mean"] for line in path.read_text().splitlines()] == [3.0, 4.0]


def test_tensorboard_backend_reads_back_with_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    backend = TensorBoardBackend(tmp_path / "tb")
    for step in range(3):
        backend.write(step, {"reward/mean": step / 2}, {"reward/dist/hist": [0.0, 1.0, float(step)]})
    backend.close()
    acc = EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("reward/mean")] == [(0, 0.0), (1, 0.5), (2, 1.0)]
    hist = acc.Histograms("reward/dist/hist")
    assert [h.step for h in hist] == [0, 1, 2]
    assert hist[2].histogram_value.max == 2.0 and hist[2].histogram_value.num == 3


def test_backends_selected_from_config(tmp_path):
    cfg = MetricsConfig.model_validate(
        {"backends": [{"type": "console"}, {"type": "jsonl", "path": str(tmp_path / "m.jsonl")}]}
    )
    logger = MetricLogger.from_config(cfg, total_steps=1)
    assert [type(b).__name__ for b in logger.backends] == ["ConsoleBackend", "JsonlBackend"]
    logger.close()

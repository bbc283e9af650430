"""Plot a metric per step from an app's metrics JSONL (default: the GRPO correctness reward).

    python -m apps.demo.plot runs/grpo_demo/metrics.jsonl --out runs/grpo_demo/reward.png

Writes a PNG (matplotlib, Agg backend: no display needed) and prints a compact table: the value
per step (binned when there are many steps) and first/last/best. Steps without the key are skipped.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

__all__ = ["DEFAULT_KEY", "format_table", "plot_metric", "read_series"]

DEFAULT_KEY = "reward/correct/mean"  # the GRPO app's record_metric("reward/correct") after its MEAN reduce


def read_series(path: str | Path, key: str = DEFAULT_KEY) -> list[tuple[int, float]]:
    """(step, value) pairs of ``key`` from a metrics JSONL file, in file order."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"metrics file {str(path)!r} does not exist")
    series: list[tuple[int, float]] = []
    seen: set[str] = set()
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{lineno}: not a JSON object ({err.msg})") from err
        seen.update(record)
        value = record.get(key)
        if isinstance(value, (int, float)) and not math.isnan(value):
            series.append((int(record["step"]), float(value)))
    if not series:
        near = sorted(k for k in seen if k.split("/")[0] == key.split("/")[0]) or sorted(seen)[:20]
        raise KeyError(f"no step in {path} has {key!r}; keys there include: {', '.join(near)}")
    return series


def format_table(series: list[tuple[int, float]], key: str, rows: int = 20) -> str:
    """A compact text table: ``rows`` bins of steps with their mean, then first/last/best."""
    size = max(1, math.ceil(len(series) / rows))
    lines = [f"{'steps':>11}  {key}"]
    for i in range(0, len(series), size):
        chunk = series[i:i + size]
        mean = sum(v for _, v in chunk) / len(chunk)
        span = f"{chunk[0][0]}" if len(chunk) == 1 else f"{chunk[0][0]}-{chunk[-1][0]}"
        lines.append(f"{span:>11}  {mean:.3f}  {'#' * round(mean * 40) if 0 <= mean <= 1 else ''}")
    first, last = series[0][1], series[-1][1]
    best_step, best = max(series, key=lambda sv: sv[1])
    lines.append(f"first {first:.3f}  last {last:.3f}  best {best:.3f} (step {best_step})  steps {len(series)}")
    return "\n".join(lines)


def plot_metric(series: list[tuple[int, float]], out: str | Path, key: str = DEFAULT_KEY,
                title: str | None = None, window: int = 5) -> Path:
    """Write a PNG of the per-step values and their trailing moving average."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [s for s, _ in series]
    values = [v for _, v in series]
    smooth = [sum(values[max(0, i - window + 1): i + 1]) / len(values[max(0, i - window + 1): i + 1])
              for i in range(len(values))]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    ax.plot(steps, values, "o-", alpha=0.35, markersize=3, label="per step")
    ax.plot(steps, smooth, "-", linewidth=2, label=f"moving mean ({window} steps)")
    ax.set_xlabel("step")
    ax.set_ylabel(key)
    ax.set_title(title or key)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", help="metrics JSONL written by an app's jsonl backend")
    parser.add_argument("--key", default=DEFAULT_KEY, help=f"metric to plot (default {DEFAULT_KEY})")
    parser.add_argument("--out", default=None, help="PNG path (default: next to the metrics file)")
    parser.add_argument("--title", default=None)
    args = parser.parse_args(argv)
    series = read_series(args.metrics, args.key)
    out = Path(args.out) if args.out else Path(args.metrics).with_name("reward.png")
    plot_metric(series, out, args.key, args.title)
    print(format_table(series, args.key))
    print(f"plot: {out}")
    return out


if __name__ == "__main__":
    main()

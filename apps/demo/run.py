"""The CPU demo end to end: SFT cold start, GRPO from its checkpoint, then the reward plot.

    python -m apps.demo.run                       # configs/sft.yaml, then configs/grpo_demo.yaml
    python -m apps.demo.run --skip-sft            # reuse runs/demo/sft

Each stage runs as its own process (``python -m apps.<app>.main``), so it is exactly what a user
would type; the stage timings are printed at the end.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from apps.demo.plot import DEFAULT_KEY, format_table, plot_metric, read_series

SFT_CONFIG = "configs/sft.yaml"
GRPO_CONFIG = "configs/grpo_demo.yaml"
SFT_CHECKPOINT = Path("runs/demo/sft")
GRPO_METRICS = Path("runs/demo/grpo/metrics.jsonl")  # the jsonl backend path in configs/grpo_demo.yaml


def _run(cmd: list[str]) -> float:
    print("+ " + " ".join(cmd), flush=True)
    start = time.perf_counter()
    done = subprocess.run(cmd, check=False)
    if done.returncode:
        raise SystemExit(f"demo stage failed (exit {done.returncode}): {' '.join(cmd)}")
    return time.perf_counter() - start


def run_sft(config: str = SFT_CONFIG, checkpoint: Path = SFT_CHECKPOINT, overrides: list[str] = ()) -> float:
    """Supervised cold start; writes an HF checkpoint dir at ``checkpoint``. Returns seconds taken."""
    return _run([sys.executable, "-m", "apps.sft.main", "--config", config, f"output_dir={checkpoint}", *overrides])


def run_grpo(checkpoint: Path, config: str = GRPO_CONFIG, overrides: list[str] = ()) -> float:
    """GRPO starting from ``checkpoint``; its metrics go where ``config``'s jsonl backend says
    (``GRPO_METRICS`` for the demo config). Returns seconds taken."""
    return _run([sys.executable, "-m", "apps.grpo.main", "--config", config, f"model.path={checkpoint}",
                 *overrides])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sft-config", default=SFT_CONFIG)
    parser.add_argument("--grpo-config", default=GRPO_CONFIG)
    parser.add_argument("--checkpoint", type=Path, default=SFT_CHECKPOINT)
    parser.add_argument("--metrics", type=Path, default=GRPO_METRICS, help="the GRPO run's metrics JSONL")
    parser.add_argument("--key", default=DEFAULT_KEY)
    parser.add_argument("--skip-sft", action="store_true", help="start GRPO from an existing --checkpoint")
    parser.add_argument("--sft", nargs="*", default=[], metavar="KEY=VALUE", help="overrides for the SFT app")
    parser.add_argument("--grpo", nargs="*", default=[], metavar="KEY=VALUE", help="overrides for the GRPO app")
    args = parser.parse_args(argv)
    timings: dict[str, float] = {}
    if not args.skip_sft:
        timings["sft"] = run_sft(args.sft_config, args.checkpoint, args.sft)
    elif not (args.checkpoint / "config.json").is_file():
        raise SystemExit(f"--skip-sft: {args.checkpoint} is not a checkpoint dir (no config.json); run SFT first")
    timings["grpo"] = run_grpo(args.checkpoint, args.grpo_config, args.grpo)
    series = read_series(args.metrics, args.key)
    out = plot_metric(series, args.metrics.with_name("reward.png"), args.key, title="GRPO on the built-in tasks (CPU)")
    print(format_table(series, args.key))
    print(f"plot: {out}")
    print("stage seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items())
          + f", total {sum(timings.values()):.0f}")


if __name__ == "__main__":
    main()

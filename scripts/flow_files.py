"""Count the project files one GRPO rollout and one train-and-push step run code from.

A structural measure for the next engineer: how many of the repository's own files (not tests,
not third-party packages) execute while ``rollout_group`` produces one group, and while
``StepRunner.train`` takes one step and publishes the weights. Runs the real app in sync mode on
the local backend (every actor in this process, so one profiler sees them all; generation's
worker threads too), with the reference model on. Prints one JSON line.

    python scripts/flow_files.py [--show]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

os.environ.setdefault("TRITON_INTERPRET", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class FileRecorder:
    """Files of the repository whose functions are entered while ``active`` (all threads)."""

    def __init__(self) -> None:
        self.active = False
        self.files: set[str] = set()

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if self.active and event == "call":
            name = frame.f_code.co_filename
            if name.startswith(str(ROOT)) and "/.venv" not in name and "/tests/" not in name and name != __file__:
                self.files.add(str(Path(name).relative_to(ROOT)))

    def window(self, fn: Any) -> Any:
        """Wrap coroutine function ``fn``: record during its first call only."""
        done = False

        async def wrapped(*args: Any, **kwargs: Any) -> Any:
            nonlocal done
            if done:
                return await fn(*args, **kwargs)
            done, self.active = True, True
            try:
                return await fn(*args, **kwargs)
            finally:
                self.active = False

        return wrapped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", action="store_true", help="list the files")
    parser.add_argument("--turns", type=int, default=1, help="turns per episode (> 1: multi-turn episodes)")
    args = parser.parse_args()
    import apps.grpo.main as app
    from apps.grpo.config import GRPOConfig
    from forge_kernels.config import load_config

    # the drivers live in apps/grpo/main.py (before: apps/grpo/loops.py)
    module = sys.modules.get("apps.grpo.loops") or app
    rollout, train = FileRecorder(), FileRecorder()
    module.rollout_group = rollout.window(module.rollout_group)
    module.StepRunner.train = train.window(module.StepRunner.train)

    def both(frame: Any, event: str, arg: Any) -> None:
        rollout(frame, event, arg)
        train(frame, event, arg)

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(GRPOConfig, ROOT / "configs" / "grpo_tiny.yaml", [
            "mode=sync", "steps=2", "rollout.groups_per_step=1", f"run_dir={tmp}/run", "use_reference=true",
            f"store.namespace=f{uuid.uuid4().hex[:8]}", f"store.root={tmp}/shm", "metrics.backends=[]",
            *([f"rollout.turns={{max_turns: {args.turns}, stop_on: never}}"] if args.turns > 1 else [])])
        threading.setprofile(both)
        sys.setprofile(both)
        try:
            asyncio.run(app.run(cfg))
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
    out = {"turns": args.turns, "rollout_files": len(rollout.files), "train_and_push_files": len(train.files)}
    if args.show:
        out |= {"rollout": sorted(rollout.files), "train_and_push": sorted(train.files)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()

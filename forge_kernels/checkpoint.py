"""Full-state checkpoints of a run: one directory per step, written atomically, found on resume.

A checkpoint is ``<dir>/step-000012/`` holding one file per stateful part (the trainer's weights,
optimiser, schedule and RNG; the dataset's position and RNG; each generator rank's sampling seed;
the replay buffer's groups) and ``meta.json``, written last: the step, the policy version and the
run's fingerprint (what must match to resume: model shape, loss, trainer world size). Parts are
written into ``<dir>/.tmp-step-000012-<pid>/`` and the directory is renamed into place only when
every part and ``meta.json`` are on disk, so a crash mid-write leaves the previous checkpoint the
newest complete one. Reading validates before anything is loaded and names the checkpoint and the
mismatch: a wrong path, a missing or truncated part, another configuration.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from forge_kernels.config import StrictModel

__all__ = ["CheckpointConfig", "CheckpointError", "CheckpointWriter", "ResumePoint", "find_resume_point",
           "read_meta"]

_PREFIX = "step-"
META = "meta.json"


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used: it is missing, incomplete, corrupted or from another run shape."""


class CheckpointConfig(StrictModel):
    """The ``checkpoint:`` YAML section.

    ``interval``: save every N optimiser steps (null: never). ``dir``: where (default
    ``<run_dir>/checkpoints``). ``keep``: complete checkpoints kept (older ones are deleted).
    """

    interval: int | None = Field(default=None, ge=1, description="save every N steps (null: no checkpoints)")
    dir: str | None = Field(default=None, description="default: <run_dir>/checkpoints")
    keep: int = Field(default=2, ge=1, description="newest complete checkpoints kept")


@dataclass(frozen=True)
class ResumePoint:
    """A validated checkpoint to resume from."""

    path: Path
    step: int  # the last step the checkpoint includes (resume runs step + 1 next)
    version: int  # the trainer's policy version at that step
    meta: dict[str, Any]


def _step_dir(root: Path, step: int) -> Path:
    return root / f"{_PREFIX}{step:06d}"


def read_meta(path: str | Path, fingerprint: dict[str, Any] | None = None) -> ResumePoint:
    """Validate checkpoint ``path`` (and, given ``fingerprint``, that it belongs to this run's
    shape); raise :class:`CheckpointError` naming the checkpoint and what is wrong."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise CheckpointError(f"resume: checkpoint {str(path)!r} does not exist (expected a directory like "
                              f"<checkpoint.dir>/{_PREFIX}000012)")
    meta_path = path / META
    try:
        meta = json.loads(meta_path.read_text())
        step, version, parts = int(meta["step"]), int(meta["version"]), list(meta["parts"])
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {str(path)!r} is incomplete: no {META} (its write was interrupted)") from None
    except (ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"checkpoint {str(path)!r} has a corrupted {META}: {err}") from None
    for part in parts:
        if not (path / part).is_file() or (path / part).stat().st_size == 0:
            raise CheckpointError(f"checkpoint {str(path)!r} is missing its part {part!r}")
    if fingerprint is not None:
        saved = meta.get("fingerprint", {})
        diffs = {k: (saved.get(k), v) for k, v in fingerprint.items() if saved.get(k) != v}
        if diffs:
            described = "; ".join(f"{k}: checkpoint has {a!r}, this run has {b!r}" for k, (a, b) in diffs.items())
            raise CheckpointError(f"checkpoint {str(path)!r} is from another configuration ({described})")
    return ResumePoint(path, step, version, meta)


def complete_checkpoints(root: str | Path) -> list[Path]:
    """Complete checkpoints under ``root``, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(_PREFIX) and (p / META).is_file()]
    return sorted(found, key=lambda p: p.name)


def find_resume_point(resume: str, root: str | Path, fingerprint: dict[str, Any]) -> ResumePoint | None:
    """``resume``: ``never`` -> None; ``auto`` -> the newest complete checkpoint under ``root`` (None
    when there is none); anything else is a checkpoint path that must exist and match."""
    if resume == "never":
        return None
    if resume == "auto":
        found = complete_checkpoints(root)
        return read_meta(found[-1], fingerprint) if found else None
    return read_meta(resume, fingerprint)


class CheckpointWriter:
    """Writes one checkpoint: ``begin(step)`` gives the directory parts are written into;
    ``commit(...)`` writes ``meta.json``, renames the directory into place and prunes old ones."""

    def __init__(self, root: str | Path, keep: int) -> None:
        self.root = Path(root)
        self.keep = keep
        self._tmp: Path | None = None
        self._step = -1

    def begin(self, step: int) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        for stale in self.root.glob(f".tmp-{_PREFIX}*"):  # interrupted writes of earlier runs
            shutil.rmtree(stale, ignore_errors=True)
        self._tmp = self.root / f".tmp-{_PREFIX}{step:06d}-{os.getpid()}"
        self._tmp.mkdir()
        self._step = step
        return self._tmp

    def commit(self, version: int, fingerprint: dict[str, Any], extra: dict[str, Any] | None = None) -> Path:
        if self._tmp is None:
            raise RuntimeError("CheckpointWriter.commit() without begin()")
        parts = sorted(p.name for p in self._tmp.iterdir())
        meta = {"step": self._step, "version": version, "parts": parts, "fingerprint": fingerprint, **(extra or {})}
        tmp_meta = self._tmp / (META + ".tmp")
        with open(tmp_meta, "w") as f:
            json.dump(meta, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_meta, self._tmp / META)
        final = _step_dir(self.root, self._step)
        if final.exists():  # a re-run of this step after a crash: the new one replaces it
            shutil.rmtree(final)
        os.replace(self._tmp, final)
        self._tmp = None
        for old in complete_checkpoints(self.root)[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return final

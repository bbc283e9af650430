"""KernelBook-style SFT data: rows of (``python_code``, ``triton_code``, ``entry_point``).

Each row pairs a PyTorch module (class ``entry_point`` plus ``get_inputs``/``get_init_inputs``)
with a Triton rewrite (conventionally class ``<entry_point>New``). Rows load from ``.json`` (a
list of objects), ``.jsonl`` (one object a line) or ``.parquet`` (read with pyarrow), or from a
folder of such files. Every row is parsed; a bad one raises :class:`TaskFormatError` naming the
file, the row and the problem, or is skipped (and counted) with ``skip_invalid=True``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import Field

from forge_kernels.config import StrictModel
from forge_kernels.tasks.source_check import TaskFormatError, check_reference_source, parse_source

__all__ = ["KernelBookExample", "load_kernelbook"]

log = logging.getLogger(__name__)

_SUFFIXES = (".json", ".jsonl", ".parquet")
_REQUIRED = ("python_code", "triton_code", "entry_point")


class KernelBookExample(StrictModel):
    """One (PyTorch reference, Triton solution) pair for supervised fine-tuning."""

    name: str = Field(description="'<file stem>/<uuid or row index>'")
    python_code: str
    triton_code: str
    entry_point: str = Field(min_length=1, description="the reference class in python_code")
    origin: str = Field(description="'<file>:<row>'")

    @property
    def new_class(self) -> str:
        """The class name the Triton rewrite is expected to define."""
        return f"{self.entry_point}New"


def _rows_json(path: Path) -> Iterator[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise TaskFormatError(f"{path}: invalid JSON at line {err.lineno}, column {err.colno}: {err.msg}") from err
    if not isinstance(data, list):
        raise TaskFormatError(f"{path}: expected a JSON list of row objects, got {type(data).__name__}")
    yield from data


def _rows_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as err:
                raise TaskFormatError(f"{path}: invalid JSON on line {lineno}: {err.msg}") from err


def _rows_parquet(path: Path) -> Iterator[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as err:
        raise TaskFormatError(f"{path}: reading Parquet needs pyarrow (`pip install pyarrow`), "
                              f"which is not installed; or convert the file to JSONL") from err
    try:
        parquet = pq.ParquetFile(path)
    except Exception as err:  # noqa: BLE001 - pyarrow raises several unrelated types for bad files
        raise TaskFormatError(f"{path}: not a readable Parquet file: {err}") from err
    missing = [c for c in _REQUIRED if c not in parquet.schema_arrow.names]
    if missing:
        raise TaskFormatError(f"{path}: Parquet file lacks column(s) {missing}; "
                              f"it has {parquet.schema_arrow.names}")
    columns = [c for c in (*_REQUIRED, "uuid") if c in parquet.schema_arrow.names]
    for batch in parquet.iter_batches(columns=columns):
        yield from batch.to_pylist()


_READERS = {".json": _rows_json, ".jsonl": _rows_jsonl, ".parquet": _rows_parquet}


def _example(row: Any, path: Path, index: int) -> KernelBookExample:
    origin = f"{path}:row {index}"
    if not isinstance(row, dict):
        raise TaskFormatError(f"{origin}: expected an object with {list(_REQUIRED)}, got {type(row).__name__}")
    missing = [k for k in _REQUIRED if not isinstance(row.get(k), str) or not row[k].strip()]
    if missing:
        raise TaskFormatError(f"{origin}: missing or empty field(s) {missing} (need {list(_REQUIRED)})")
    entry_point = row["entry_point"].strip()
    check_reference_source(row["python_code"], f"{origin} python_code", model_class=entry_point)
    parse_source(row["triton_code"], f"{origin} triton_code")
    key = row.get("uuid", index)
    return KernelBookExample(name=f"{path.stem}/{key}", python_code=row["python_code"],
                             triton_code=row["triton_code"], entry_point=entry_point, origin=origin)


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in _SUFFIXES)
        if not files:
            raise TaskFormatError(f"{path}: folder holds no {'/'.join(_SUFFIXES)} files")
        return files
    if not path.exists():
        raise TaskFormatError(f"{path}: no such file or folder")
    if path.suffix not in _SUFFIXES:
        raise TaskFormatError(f"{path}: unsupported file type {path.suffix!r}; expected one of {_SUFFIXES}")
    return [path]


def load_kernelbook(path: str | Path, limit: int | None = None,
                    skip_invalid: bool = False) -> list[KernelBookExample]:
    """Load (python_code, triton_code, entry_point) rows from a file or a folder of files.

    With ``skip_invalid`` a malformed row is logged and skipped instead of raising; malformed
    files (unreadable JSON, Parquet without the columns) always raise.
    """
    examples: list[KernelBookExample] = []
    skipped = 0
    for file in _files(Path(path).expanduser()):
        if limit is not None and len(examples) >= limit:
            break
        for index, row in enumerate(_READERS[file.suffix](file)):
            if limit is not None and len(examples) >= limit:
                break
            try:
                examples.append(_example(row, file, index))
            except TaskFormatError as err:
                if not skip_invalid:
                    raise
                skipped += 1
                log.warning("skipping KernelBook row: %s", err)
    if skipped:
        log.warning("skipped %d malformed KernelBook row(s) under %s", skipped, path)
    return examples

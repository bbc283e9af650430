"""The one-way data channel from an evaluation child to the evaluator: framed JSON + raw bytes.

Nothing that crosses it is unpickled. A frame is ``<u32 header length><JSON header><payload>``;
tensors travel as their raw bytes with ``dtype``/``shape`` in the header and are rebuilt with
``torch.frombuffer`` after the header is validated. Everything read here may have been written by
candidate code (it shares the child's process), so the reader trusts nothing: sizes are bounded
and checked, dtypes come from a fixed table.
"""

from __future__ import annotations

import json
import math
import os
import struct
from typing import Any

import torch

__all__ = ["ChannelWriter", "Frame", "parse_frames", "frame_tensor", "verify_stream", "DTYPES", "ProtocolError"]

DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}
_HEADER = struct.Struct("<I")
_MAX_HEADER = 1 << 20


class ProtocolError(ValueError):
    """The child sent something that is not a well-formed frame."""


class ChannelWriter:
    """Child side: writes frames to an inherited pipe fd with plain ``os.write`` (no buffering)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._write = os.write  # captured: candidate code cannot redirect later writes
        self._seq = 0

    def send(self, header: dict[str, Any], payload: bytes | memoryview = b"") -> None:
        data = json.dumps({**header, "seq": self._seq}, allow_nan=True).encode()
        self._seq += 1
        header_len = _HEADER.pack(len(data))
        self._write_all(header_len + data)
        if payload:
            self._write_all(payload)

    def _write_all(self, data: bytes | memoryview) -> None:
        view = memoryview(data).cast("B")
        while view:
            written = self._write(self.fd, view)
            view = view[written:]


class Frame:
    """One received frame: its header and, for tensors, the rebuilt CPU tensor."""

    __slots__ = ("header", "tensor")

    def __init__(self, header: dict[str, Any], tensor: torch.Tensor | None) -> None:
        self.header = header
        self.tensor = tensor

    @property
    def kind(self) -> str:
        return str(self.header.get("kind", ""))


def frame_tensor(tensor_bytes: bytes | memoryview, dtype: str, shape: list[int]) -> torch.Tensor:
    """Rebuild a tensor from raw bytes; raises :class:`ProtocolError` on any inconsistency."""
    if dtype not in DTYPES:
        raise ProtocolError(f"unknown dtype {dtype!r}; expected one of {sorted(DTYPES)}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ProtocolError(f"bad shape {shape!r}; expected a list of non-negative ints")
    torch_dtype = DTYPES[dtype]
    itemsize = torch.empty((), dtype=torch_dtype).element_size()
    expected = math.prod(shape) * itemsize
    if len(tensor_bytes) != expected:
        raise ProtocolError(f"tensor payload has {len(tensor_bytes)} bytes, shape {shape} {dtype} needs {expected}")
    if expected == 0:
        return torch.empty(shape, dtype=torch_dtype)
    return torch.frombuffer(bytearray(tensor_bytes), dtype=torch_dtype).reshape(shape)


def parse_frames(data: bytes | bytearray) -> tuple[list[Frame], str | None]:
    """Split a received byte stream into frames. Returns the frames read and, if the stream was cut
    or malformed, a description of the problem (the frames before it are still returned)."""
    frames: list[Frame] = []
    view = memoryview(data)
    pos = 0
    while pos < len(view):
        if len(view) - pos < _HEADER.size:
            return frames, f"stream cut inside a frame length at byte {pos}"
        (length,) = _HEADER.unpack_from(view, pos)
        pos += _HEADER.size
        if length > _MAX_HEADER or pos + length > len(view):
            return frames, f"frame header of {length} bytes does not fit the stream"
        try:
            header = json.loads(bytes(view[pos : pos + length]))
        except ValueError as err:
            return frames, f"frame header is not JSON: {err}"
        pos += length
        if not isinstance(header, dict):
            return frames, "frame header is not a JSON object"
        tensor = None
        nbytes = header.get("nbytes", 0)
        if header.get("kind") == "tensor":
            if not isinstance(nbytes, int) or nbytes < 0 or pos + nbytes > len(view):
                return frames, f"payload of {nbytes!r} bytes does not fit the stream"
            try:
                tensor = frame_tensor(view[pos : pos + nbytes], header.get("dtype"), header.get("shape"))
            except ProtocolError as err:
                return frames, str(err)
            pos += nbytes
        frames.append(Frame(header, tensor))
    return frames, None


_ONCE = frozenset({"launches", "aten", "checks", "done", "input_dtypes", "device", "profile", "torch_state"})


def _identity(header: dict[str, Any]) -> tuple[Any, ...] | None:
    """What makes a frame unique within one report (None: may repeat, e.g. notes)."""
    kind = header.get("kind")
    if kind in _ONCE:
        return (kind,)
    if kind == "timing":
        return (kind, header.get("name"))
    if kind in ("output", "tensor"):
        return (kind, header.get("tag"), header.get("shapes"), header.get("trial"), header.get("index"))
    return None


def verify_stream(frames: list[Frame]) -> str | None:
    """Check the report's structure; a description of the first problem, or None.

    The child numbers its frames; candidate code shares its process and can find the channel, so
    a frame it writes shows up as a gap or repeat in the numbering, as a second frame of a kind
    that comes once, or as something after ``done``. Any of these is a forged report."""
    seen: set[tuple[Any, ...]] = set()
    for position, frame in enumerate(frames):
        header = frame.header
        if header.get("seq") != position:
            return f"frame {position} ({header.get('kind')!r}) carries sequence number {header.get('seq')!r}"
        if position and frames[position - 1].kind == "done":
            return f"frame {position} ({header.get('kind')!r}) after the end of the report"
        identity = _identity(header)
        if identity is not None:
            if identity in seen:
                return f"a second {header.get('kind')!r} frame {identity[1:] or ''}".rstrip()
            seen.add(identity)
    return None

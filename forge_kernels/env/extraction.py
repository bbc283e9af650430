"""Pull the candidate module out of a model's reply, or say why there is none.

Steps: drop reasoning (``<think>…</think>`` pairs, a reply that starts inside a think block and
only closes it, and an unterminated ``<think>`` that runs to the end); collect fenced blocks
(```` ```python ````, ```` ```py ````, ```` ```python3 ````, or a bare fence; other languages are
ignored); take the last one that defines ``class ModelNew``. With no fenced block at all, a reply
that itself defines ``class ModelNew`` is taken from its first line of code. A fence left open at the
end of the reply (the model ran out of tokens) still yields its contents.

Syntax is not checked here: a syntax error is the evaluator's fault class, not an extraction
failure.
"""

from __future__ import annotations

import re
from enum import Enum

from pydantic import BaseModel

__all__ = ["ExtractionFailure", "ExtractionResult", "extract_code", "strip_thinking"]

_THINK_PAIR = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_FENCE = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[\w+.-]*)[^\n]*$")
_PYTHON_LANGS = {"", "python", "py", "python3", "py3"}
_CODE_START = re.compile(r"^(import |from \S+ import |@|class |def |#)")


class ExtractionFailure(str, Enum):
    """Why no candidate module could be taken from a reply."""

    EMPTY_RESPONSE = "empty_response"
    ONLY_THINKING = "only_thinking"
    NO_CODE_BLOCK = "no_code_block"
    EMPTY_CODE_BLOCK = "empty_code_block"
    NO_MODEL_NEW = "no_model_new"


class ExtractionResult(BaseModel):
    """The extracted code (``None`` on failure), how it was found, and a message for feedback."""

    code: str | None
    failure: ExtractionFailure | None = None
    message: str
    method: str | None = None  # "fenced_block", "open_fence" or "unfenced"; None on failure

    @property
    def ok(self) -> bool:
        return self.failure is None


def strip_thinking(text: str) -> str:
    """Remove reasoning: closed think blocks, text up to an orphan ``</think>``, an open ``<think>``."""
    text = _THINK_PAIR.sub("", text)
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:  # the chat template opened the think block inside the prompt
        text = text[closes[-1].end():]
    opened = _THINK_OPEN.search(text)
    if opened:  # thinking never finished; nothing after it is an answer
        text = text[: opened.start()]
    return text


def _fenced_blocks(text: str) -> list[tuple[str, str, bool]]:
    """(language, body, closed) for each fenced block, in order."""
    blocks: list[tuple[str, str, bool]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, lang = opening.group("fence"), opening.group("lang").lower()
        body: list[str] = []
        i += 1
        closed = False
        while i < len(lines):
            stripped = lines[i].strip()
            if stripped.startswith(fence[0] * len(fence)) and stripped.strip(fence[0]) == "":
                closed = True
                i += 1
                break
            body.append(lines[i])
            i += 1
        blocks.append((lang, "\n".join(body), closed))
    return blocks


def _defines(code: str, class_name: str) -> bool:
    return re.search(rf"^class\s+{re.escape(class_name)}\b", code, re.MULTILINE) is not None


def extract_code(text: str | None, new_class: str = "ModelNew") -> ExtractionResult:
    """Extract the module defining ``new_class`` from a model reply."""
    fence_hint = f"reply with the complete module, defining class {new_class}, in one ```python block"
    if text is None or not text.strip():
        return ExtractionResult(code=None, failure=ExtractionFailure.EMPTY_RESPONSE,
                                message=f"the reply is empty; {fence_hint}")
    answer = strip_thinking(text)
    if not answer.strip():
        opens = [m.start() for m in _THINK_OPEN.finditer(text)]
        closes = [m.start() for m in _THINK_CLOSE.finditer(text)]
        unterminated = bool(opens) and (not closes or opens[-1] > closes[-1])
        detail = ("the reply ended inside <think> (no answer after it)" if unterminated
                  else "the reply holds only <think> reasoning")
        return ExtractionResult(code=None, failure=ExtractionFailure.ONLY_THINKING,
                                message=f"{detail}; finish thinking, then {fence_hint}")
    blocks = _fenced_blocks(answer)
    python_blocks = [(body, closed) for lang, body, closed in blocks if lang in _PYTHON_LANGS]
    if blocks and not python_blocks:
        langs = sorted({lang for lang, _, _ in blocks})
        return ExtractionResult(code=None, failure=ExtractionFailure.NO_CODE_BLOCK,
                                message=f"found only non-Python code blocks ({', '.join(langs)}); {fence_hint}")
    if python_blocks:
        non_empty = [(body, closed) for body, closed in python_blocks if body.strip()]
        if not non_empty:
            return ExtractionResult(code=None, failure=ExtractionFailure.EMPTY_CODE_BLOCK,
                                    message=f"the ```python block is empty; {fence_hint}")
        for body, closed in reversed(non_empty):
            if _defines(body, new_class):
                return ExtractionResult(code=body.strip("\n") + "\n",
                                        message="took the last ```python block defining "
                                                f"class {new_class}",
                                        method="fenced_block" if closed else "open_fence")
        return ExtractionResult(code=None, failure=ExtractionFailure.NO_MODEL_NEW,
                                message=f"no ```python block defines class {new_class} (found "
                                        f"{len(non_empty)} block(s)); {fence_hint}")
    if _defines(answer, new_class):
        lines = answer.splitlines()
        start = next(i for i, line in enumerate(lines) if _CODE_START.match(line))
        return ExtractionResult(code="\n".join(lines[start:]).strip("\n") + "\n",
                                message="no fenced block; took the reply from its first code line",
                                method="unfenced")
    return ExtractionResult(code=None, failure=ExtractionFailure.NO_CODE_BLOCK,
                            message=f"no ```python code block found; {fence_hint}")

"""The kernel-writing environment: prompts for tasks and extraction of the candidate module."""

from forge_kernels.env.extraction import ExtractionFailure, ExtractionResult, extract_code, strip_thinking
from forge_kernels.env.prompts import (
    SYSTEM_PROMPT,
    ChatMessage,
    PromptConfig,
    render_messages,
    sft_messages,
    task_messages,
)

__all__ = [
    "SYSTEM_PROMPT",
    "ChatMessage",
    "ExtractionFailure",
    "ExtractionResult",
    "PromptConfig",
    "extract_code",
    "render_messages",
    "sft_messages",
    "strip_thinking",
    "task_messages",
]

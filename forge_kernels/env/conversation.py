"""Token ids of a multi-turn conversation, extended turn by turn without re-tokenising.

A conversation's ids are the first prompt (rendered through the chat template), then for every
turn the ids the model *sampled*, then the template's ids for the turn boundary and the next user
message (the environment's feedback) and the opening of the next assistant turn. Only that new
delta ever goes through the template and the tokenizer; the model's own tokens are kept as
sampled, so the trainer scores exactly what the generator produced (slime's retokenisation
mismatch cannot happen: ``decode(encode(text))`` need not round-trip, and templates may rewrite
earlier assistant turns, e.g. strip their thinking).

How the delta is found: the template renders a probe conversation whose last assistant message
is a sentinel string, followed by the new user message; everything after the sentinel is the
boundary text (for ChatML: ``<|im_end|>\\n<|im_start|>user\\n...<|im_end|>\\n<|im_start|>assistant\\n``).
If the model ended its turn with the template's end-of-assistant token (its stop token), that
token is already in the sampled ids and is not added twice; if it was cut off (``finish_reason
"length"``), the boundary closes the turn for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from forge_kernels.env.prompts import ChatMessage

__all__ = ["ConversationTokens"]

_SENTINEL = "\x1fFORGE_ASSISTANT_SENTINEL\x1f"


class ConversationTokens:
    """Renders first prompts and turn boundaries with one tokenizer's chat template."""

    def __init__(self, tokenizer: Any) -> None:
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError(f"tokenizer {type(tokenizer).__name__} has no chat_template; multi-turn needs one")
        self.tokenizer = tokenizer

    def initial_ids(self, messages: Sequence[ChatMessage]) -> list[int]:
        """The first prompt: ``messages`` rendered with the assistant turn opened."""
        ids = self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True,
                                                 return_dict=False)
        return [int(i) for i in ids]

    def boundary_text(self, message: ChatMessage) -> str:
        """The template text after an assistant reply, through ``message``, to the next assistant
        opening (the end-of-assistant marker included)."""
        if message.get("role") not in ("user", "system"):
            raise ValueError(f"a turn boundary opens with a user (or system) message, got role {message.get('role')!r}")
        probe: list[ChatMessage] = [{"role": "user", "content": "x"},
                                    {"role": "assistant", "content": _SENTINEL}, dict(message)]  # type: ignore[list-item]
        text = self.tokenizer.apply_chat_template(probe, add_generation_prompt=True, tokenize=False)
        at = text.find(_SENTINEL)
        if at < 0 or text.find(_SENTINEL, at + 1) >= 0:
            raise ValueError("the chat template does not render the assistant content verbatim exactly once; "
                             "cannot find the turn boundary")
        tail = text[at + len(_SENTINEL):]
        if message["content"] and message["content"] not in tail:
            raise ValueError("the chat template dropped the feedback message from the rendered boundary")
        return tail

    def boundary_ids(self, sampled_ids: Sequence[int], message: ChatMessage) -> list[int]:
        """Ids to append after ``sampled_ids`` so the next turn's prompt shows ``message``.

        The template's end-of-assistant token is dropped from the front when the model already
        sampled it as its last token (a normal stop)."""
        ids = [int(i) for i in self.tokenizer.encode(self.boundary_text(message), add_special_tokens=False)]
        if sampled_ids and ids and int(sampled_ids[-1]) == ids[0]:
            return ids[1:]
        return ids

    def extend(self, context_ids: Sequence[int], sampled_ids: Sequence[int], message: ChatMessage) -> list[int]:
        """The next turn's prompt: ``context_ids + sampled_ids + boundary_ids(sampled_ids, message)``."""
        return [*context_ids, *sampled_ids, *self.boundary_ids(sampled_ids, message)]

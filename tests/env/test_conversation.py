"""Conversation ids: the sampled ids plus the template's boundary, never re-tokenised."""

from __future__ import annotations

import pytest

from forge_kernels.env.conversation import ConversationTokens

SYSTEM = {"role": "system", "content": "You write kernels."}
USER = {"role": "user", "content": "Write ModelNew using Triton kernels."}
REPLIES = ["```python\nimport torch\n```", "def forward(self, x):\n    return x * 2\n"]
FEEDBACK = ["Result: output_value_mismatch. The output values differ.", "Result: none."]


def test_chained_ids_equal_the_template_rendering_of_the_whole_conversation(tokenizer):
    conv = ConversationTokens(tokenizer)
    eos = tokenizer.eos_token_id
    ids = conv.initial_ids([SYSTEM, USER])
    messages = [SYSTEM, USER]
    for reply, feedback in zip(REPLIES, FEEDBACK):
        sampled = tokenizer.encode(reply, add_special_tokens=False) + [eos]  # a normal stop samples <|im_end|>
        ids = conv.extend(ids, sampled, {"role": "user", "content": feedback})
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": feedback}]
        expected = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                 return_dict=False)
        assert ids == list(expected)


def test_boundary_after_a_normal_stop_does_not_repeat_the_end_token(tokenizer):
    conv = ConversationTokens(tokenizer)
    eos = tokenizer.eos_token_id
    boundary = conv.boundary_ids([7, eos], {"role": "user", "content": "fix"})
    tokens = tokenizer.convert_ids_to_tokens(boundary)
    assert tokens[:2] == ["Ċ", "<|im_start|>"]  # "\n" after <|im_end|>, then the user turn
    assert tokenizer.decode(boundary) == "\n<|im_start|>user\nfix<|im_end|>\n<|im_start|>assistant\n"


def test_boundary_after_a_truncated_turn_closes_it(tokenizer):
    conv = ConversationTokens(tokenizer)
    boundary = conv.boundary_ids([7, 8], {"role": "user", "content": "fix"})  # cut off: no <|im_end|> sampled
    assert boundary[0] == tokenizer.eos_token_id
    assert tokenizer.decode(boundary) == "<|im_end|>\n<|im_start|>user\nfix<|im_end|>\n<|im_start|>assistant\n"


def test_sampled_ids_are_kept_even_when_not_what_the_tokenizer_would_produce(tokenizer):
    conv = ConversationTokens(tokenizer)
    text = "import torch"
    canonical = tokenizer.encode(text, add_special_tokens=False)
    byte_by_byte = [tokenizer.convert_tokens_to_ids(c) for c in text.replace(" ", "Ġ")]
    assert byte_by_byte != canonical and tokenizer.decode(byte_by_byte) == text
    prompt = conv.initial_ids([USER])
    ids = conv.extend(prompt, byte_by_byte, {"role": "user", "content": "again"})
    assert ids[len(prompt): len(prompt) + len(byte_by_byte)] == byte_by_byte


def test_bad_boundary_role_and_missing_template_are_named(tokenizer):
    conv = ConversationTokens(tokenizer)
    with pytest.raises(ValueError, match="'assistant'"):
        conv.boundary_ids([1], {"role": "assistant", "content": "x"})

    class NoTemplate:
        chat_template = None

    with pytest.raises(ValueError, match="no chat_template"):
        ConversationTokens(NoTemplate())

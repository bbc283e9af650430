"""SFT app: prompts as GRPO renders them, loss on assistant tokens only (token by token), length
filtering, the masked cross-entropy, KernelBook rows, and a short end-to-end run whose checkpoint
loads with AutoModelForCausalLM / AutoTokenizer."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer

from apps.sft.data import DataConfig, KernelBookConfig, build_examples, collate_sft, load_items, prompt_token_ids
from apps.sft.loss import SFTLoss
from apps.sft.main import SFTConfig, main, tokenizer_corpus
from forge_kernels.config import load_config
from forge_kernels.env import PromptConfig, extract_code, task_messages
from forge_kernels.models.tiny import train_tokenizer
from forge_kernels.tasks import BuiltinTasksConfig, load_builtin_tasks

NAMES = ["level1/add", "level1/relu", "level1/softmax"]
PROMPT = PromptConfig(one_shot=False)


@pytest.fixture(scope="module")
def items():
    return load_items(DataConfig(tasks=BuiltinTasksConfig(levels=[1], names=NAMES)))


@pytest.fixture(scope="module")
def tokenizer(items):
    return train_tokenizer(tokenizer_corpus(items, PROMPT), vocab_size=1024)


def test_loss_mask_covers_exactly_the_assistant_tokens(items, tokenizer):
    examples, report = build_examples(items, tokenizer, DataConfig(), PROMPT)
    assert report.kept == 3 and report.n_dropped == 0
    batch = collate_sft(examples, tokenizer.pad_token_id)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    for row, (task, ex) in enumerate(zip(items, examples)):
        ids, targets, mask = batch.input_ids[row], batch.target_ids[row], batch.loss_mask[row]
        p, n = len(ex.prompt_ids), len(ex.response_ids)
        # the prompt is the very id sequence the GRPO dataset actor renders for this task
        grpo_ids = tokenizer.apply_chat_template(task_messages(task, PROMPT), add_generation_prompt=True,
                                                 tokenize=True, return_dict=False)
        assert ex.prompt_ids == list(grpo_ids) == prompt_token_ids(tokenizer, task_messages(task, PROMPT))
        assert ids[:p].tolist() == ex.prompt_ids
        assert tokenizer.decode(ex.prompt_ids).endswith("<|im_start|>assistant\n")
        for pos in range(ids.shape[0]):  # token by token: a position is trained iff it predicts a response token
            predicts_response = p - 1 <= pos < p - 1 + n
            assert bool(mask[pos]) == predicts_response, (task.name, pos)
            if predicts_response:
                assert targets[pos].item() == ex.response_ids[pos - (p - 1)]
        trained = targets[mask].tolist()
        assert trained == ex.response_ids and trained[-1] == im_end
        text = tokenizer.decode(trained)
        assert text == f"```python\n{task.solution.strip()}\n```<|im_end|>"
        generated = tokenizer.decode(trained, skip_special_tokens=True)  # as the generator decodes it
        assert extract_code(generated).code.strip() == task.solution.strip()  # what the reward actor extracts
    assert not batch.loss_mask[:, -1].any()  # the last position predicts nothing


def test_length_filter_drops_and_reports(items, tokenizer):
    examples, _ = build_examples(items, tokenizer, DataConfig(), PROMPT)
    lengths = {task.name: len(ex) for task, ex in zip(items, examples)}
    limit = sorted(lengths.values())[1]  # keeps two, drops the longest
    kept, report = build_examples(items, tokenizer, DataConfig(max_seq_len=limit), PROMPT)
    longest = max(lengths, key=lengths.get)
    assert [e.name for e in kept] == [n for n in NAMES if n != longest]
    assert report.dropped == {f"longer than max_seq_len={limit} tokens": [f"{longest} ({lengths[longest]})"]}
    assert "dropped 1" in report.summary() and longest in report.summary()
    short = min(len(e.response_ids) for e in examples)
    kept, report = build_examples(items, tokenizer, DataConfig(max_response_tokens=short), PROMPT)
    assert len(kept) == 1 and report.n_dropped == 2
    with pytest.raises(ValueError, match="left no SFT examples"):
        build_examples(items, tokenizer, DataConfig(max_seq_len=10), PROMPT)


def test_sft_loss_is_masked_token_mean_cross_entropy():
    torch.manual_seed(0)
    logits = torch.randn(2, 6, 11, requires_grad=True)
    targets = torch.randint(0, 11, (2, 6))
    mask = torch.zeros(2, 6, dtype=torch.bool)
    mask[0, 1:4] = True
    mask[1, 2:6] = True
    targets[1, 5] = -100  # ignored even under the mask
    out = SFTLoss()(logits, targets, mask, torch.zeros(2, 6), torch.zeros(2, 6))
    keep = mask & (targets != -100)
    expected = F.cross_entropy(logits[keep], targets[keep])
    torch.testing.assert_close(out.loss, expected)
    out.loss.backward()
    assert logits.grad[~keep].abs().max() == 0 and logits.grad[keep].abs().max() > 0
    assert 0 <= out.scalars()["train/token_accuracy"] <= 1


def test_kernelbook_rows_train_with_their_class_names(tmp_path, tokenizer):
    (relu,) = load_builtin_tasks(levels=[1], names=["level1/relu"])
    row = {"python_code": relu.source.replace("class Model(", "class ReLUMod("),
           "triton_code": relu.solution.replace("class ModelNew(", "class ReLUModNew("),
           "entry_point": "ReLUMod", "uuid": "r1"}
    path = tmp_path / "book.jsonl"
    path.write_text(json.dumps(row) + "\n" + json.dumps({"python_code": "x"}) + "\n")  # second row malformed
    cfg = DataConfig(tasks=None, kernelbook=KernelBookConfig(path=path))
    (example,), report = build_examples(load_items(cfg), tokenizer, cfg, PROMPT)
    assert example.name == "book/r1" and report.kept == 1
    prompt = tokenizer.decode(example.prompt_ids)
    assert "name your class `ReLUModNew`" in prompt
    assert extract_code(tokenizer.decode(example.response_ids, skip_special_tokens=True), "ReLUModNew").ok
    with pytest.raises(ValueError, match="selects no examples"):
        load_items(DataConfig(tasks=None))


def _config(tmp_path, **extra) -> SFTConfig:
    overrides = [
        f"output_dir={tmp_path / 'ckpt'}",
        "data.tasks.names=[level1/add,level1/relu]",
        "prompt.one_shot=false",
        "tokenizer.vocab_size=512",
        "model.tiny={hidden_size: 64, intermediate_size: 128, num_hidden_layers: 1, num_attention_heads: 1}",
        "train.steps=6",
        "train.batch_size=2",
        "train.optim={lr: 1.0e-2, micro_batch_tokens: 2048}",
        "train.save_steps=[3]",
        f"metrics.backends=[{{type: jsonl, path: {tmp_path / 'metrics.jsonl'}}}]",
        *[f"{k}={v}" for k, v in extra.items()],
    ]
    return load_config(SFTConfig, "configs/sft.yaml", overrides)


def test_sft_app_trains_and_writes_a_loadable_checkpoint(tmp_path):
    cfg = _config(tmp_path)
    path = main(cfg)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(6))
    losses = [r["loss/sft/mean"] for r in records]
    assert losses[-1] < losses[0] - 0.5, losses
    assert records[0]["data/examples_kept/mean"] == 2
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert (path / "step_3" / "config.json").is_file() and (path / "sft_config.yaml").is_file()
    # the saved weights are the trained ones: they score the training data better than step 3's
    items = load_items(cfg.data)
    examples, _ = build_examples(items, tokenizer, cfg.data, cfg.prompt)
    batch = collate_sft(examples, tokenizer.pad_token_id)

    def loss_of(m) -> float:
        with torch.no_grad():
            return float(SFTLoss()(m(batch.input_ids).logits, batch.target_ids, batch.loss_mask).loss)

    assert loss_of(model) < loss_of(AutoModelForCausalLM.from_pretrained(path / "step_3"))
    assert abs(loss_of(model) - losses[-1]) < losses[0] - losses[-1]  # same scale as logged


def _assert_same_weights(one, two) -> None:
    a = AutoModelForCausalLM.from_pretrained(one).state_dict()
    b = AutoModelForCausalLM.from_pretrained(two).state_dict()
    for name, tensor in a.items():
        torch.testing.assert_close(b[name], tensor, rtol=1e-3, atol=1e-4, msg=name)


def test_sft_with_two_processes_matches_one(tmp_path):
    """procs=2 (FSDP2 over gloo) writes the same checkpoint as one process, within tolerance."""
    one = main(_config(tmp_path / "one", **{"train.save_steps": "[]"}))
    two = main(_config(tmp_path / "two", **{"train.save_steps": "[]", "procs": 2}))
    _assert_same_weights(one, two)


@pytest.mark.gpu
def test_sft_fsdp2_over_two_gpus_matches_one(tmp_path):
    """procs=2 on cuda: FSDP2 over nccl, one GPU per rank, same checkpoint as one GPU."""
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs, this machine has {torch.cuda.device_count()}")
    one = main(_config(tmp_path / "one", **{"train.save_steps": "[]", "device": "cuda"}))
    two = main(_config(tmp_path / "two", **{"train.save_steps": "[]", "device": "cuda", "procs": 2}))
    _assert_same_weights(one, two)


def test_sft_resumed_from_a_checkpoint_ends_where_an_uninterrupted_run_does(tmp_path):
    """Three steps, stop, then six steps with resume: auto continue from step 3 and write exactly
    the weights and per-step losses of one six-step run (same machine: bitwise)."""
    whole = main(_config(tmp_path / "whole", **{"train.save_steps": "[]", "checkpoint.interval": 1}))
    shared = {"train.save_steps": "[]", "checkpoint.interval": 1, "output_dir": tmp_path / "parts" / "ckpt"}
    main(_config(tmp_path / "parts", **shared, **{"train.steps": 3}))
    resumed = main(_config(tmp_path / "parts", **shared))
    a = AutoModelForCausalLM.from_pretrained(whole).state_dict()
    b = AutoModelForCausalLM.from_pretrained(resumed).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    rows = [json.loads(line) for line in (tmp_path / "parts" / "metrics.jsonl").read_text().splitlines()]
    whole_rows = [json.loads(line) for line in (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(6))
    assert [r["loss/sft/mean"] for r in rows] == [r["loss/sft/mean"] for r in whole_rows]

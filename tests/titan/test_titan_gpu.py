"""The TorchTitan engine on a CUDA device: flex attention (the GPU default) against HF, every loss's
step against the HF engine on the same GPU, and HF-named pushes. Run on the lent H100 by
scripts/gpu_check.sh (``-m gpu``)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from actors.engines.hf_training import HFTrainingEngine, OptimConfig
from actors.engines.titan_training import TitanConfig, TitanTrainingEngine
from losses import build_loss

pytestmark = [pytest.mark.titan, pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
OPTIM = OptimConfig(lr=1e-2, micro_batch_tokens=48, max_grad_norm=0.5)


def test_flex_attention_on_cuda_matches_hf_logits(qwen3_checkpoint, record_property):
    engine = TitanTrainingEngine(qwen3_checkpoint, OPTIM, build_loss({"name": "grpo"}), device="cuda",
                                 titan=TitanConfig(attention="auto"))  # auto: flex on GPUs
    hf = AutoModelForCausalLM.from_pretrained(qwen3_checkpoint).cuda().eval()
    ids = torch.randint(0, hf.config.vocab_size, (3, 40), generator=torch.Generator().manual_seed(0)).cuda()
    engine.model.eval()
    with torch.no_grad():
        ours, theirs = engine._logits(ids), hf(input_ids=ids).logits
    diff = float((ours - theirs).abs().max())
    record_property("qwen3_cuda_flex_max_logit_diff", diff)
    print(f"cuda flex vs HF: max |logit diff| = {diff:.3g}")
    assert theirs.abs().max() > 0.01 and diff < 1e-3


def test_a_cuda_step_matches_the_hf_engine_and_pushes_hf_names(qwen3_checkpoint, batch_for):
    loss = build_loss({"name": "grpo"})
    titan = TitanTrainingEngine(qwen3_checkpoint, OPTIM, loss, device="cuda")
    hf = HFTrainingEngine(AutoModelForCausalLM.from_pretrained(qwen3_checkpoint), OPTIM, loss, "cuda")
    batch = batch_for(hf.model.config.vocab_size)
    before = {k: v.clone() for k, v in titan.state_dict_for_push().items()}
    m_titan, m_hf = titan.train_step(batch), hf.train_step(batch)
    assert abs(m_titan["loss/total"] - m_hf["loss/total"]) < 1e-4
    pushed = titan.state_dict_for_push()
    reference = {k: v.detach() for k, v in hf.model.state_dict().items()}
    assert set(pushed) == set(reference)
    moved = max(float((pushed[k] - before[k]).abs().max()) for k in pushed)
    mismatch = max(float((pushed[k].float().cuda() - reference[k].float().cuda()).abs().max()) for k in pushed)
    print(f"after one cuda step: weights moved {moved:.3g}, titan vs HF engine {mismatch:.3g}")
    assert moved > 1e-4 and mismatch < 1e-4

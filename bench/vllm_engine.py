"""vLLM engine benchmark: start, generation, weight load from the shm store, logprob mismatch.

    python -m bench.vllm_engine [--hidden 512] [--layers 4] [--samples 32] [--tokens 32]

Needs vLLM (``bash scripts/install_vllm.sh``, then run with ``.venv-vllm/bin/python``). Builds a
tiny Qwen3 (head_dim 64) with the given size, starts the engine on it, and prints one JSON line:
engine start time; the time of ``samples`` completions of ``tokens`` tokens for one prompt
(median of 3, after one warm-up); the median time to load a new version from the shm tensor
store into the engine (worker reads the store, ``reload_weights``, prefix-cache reset); and the
largest |generator - HF trainer| logprob difference over the generated tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import tempfile
import time
import uuid

import torch

from actors.engines.sampling import SamplingConfig
from actors.engines.vllm_engine import VLLMEngineConfig, VLLMGenerationEngine
from actors.reference import sequence_logprobs
from forge_kernels.models.tiny import TinyModelConfig, build_tiny_model, save_checkpoint, train_tokenizer
from forge_kernels.store import StoreConfig, build_store, weights_key

CORPUS = ["def kernel(x_ptr, n, BLOCK: tl.constexpr):\n    pid = tl.program_id(0)\n"] * 50


async def _measure(engine: VLLMGenerationEngine, model: torch.nn.Module, store_cfg: StoreConfig,
                   samples: int, tokens: int) -> dict[str, float]:
    prompt = [[5, 6, 7, 8, 9, 10, 11, 12]]
    sampling = SamplingConfig(max_tokens=tokens, seed=0)
    await engine.generate(prompt, samples, sampling)  # warm-up
    gen_times, out = [], []
    for i in range(3):
        start = time.perf_counter()
        out = await engine.generate(prompt, samples, sampling.model_copy(update={"seed": i + 1}))
        gen_times.append(time.perf_counter() - start)
    with torch.no_grad():
        trainer = sequence_logprobs(model, out, 1.0, 8192, torch.device("cpu"))
    mismatch = max(abs(a - b) for t, c in zip(trainer, out) for a, b in zip(t, c.logprobs))
    store = build_store(store_cfg)
    load_times = []
    for version in (1, 2, 3):
        await store.put_state_dict(dict(model.state_dict()), weights_key(version))
        await engine.update_weights(version)
        load_times.append(engine.last_load_s)
    store.close_sync(unlink=True)
    return {"generate_s": statistics.median(gen_times), "weight_load_s": statistics.median(load_times),
            "logprob_max_abs_diff": mismatch, "generated_tokens": sum(len(c.token_ids) for c in out)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=32)
    args = parser.parse_args()
    tokenizer = train_tokenizer(CORPUS, vocab_size=512)
    model = build_tiny_model(TinyModelConfig(hidden_size=args.hidden, intermediate_size=3 * args.hidden,
                                             num_hidden_layers=args.layers, num_attention_heads=args.hidden // 64,
                                             num_key_value_heads=max(1, args.hidden // 256)), tokenizer).eval()
    params = sum(p.numel() for p in model.parameters())
    with tempfile.TemporaryDirectory() as tmp:
        path = save_checkpoint(model, tokenizer, f"{tmp}/ckpt")
        store_cfg = StoreConfig(namespace=f"bench{uuid.uuid4().hex[:8]}", root=f"{tmp}/shm")
        engine = VLLMGenerationEngine(str(path), "float32", VLLMEngineConfig(max_model_len=1024, kv_cache_gib=0.5),
                                      store=store_cfg)
        loop = asyncio.new_event_loop()
        try:
            result = loop.run_until_complete(_measure(engine, model, store_cfg, args.samples, args.tokens))
        finally:
            loop.run_until_complete(engine.close())
            loop.close()
    print(json.dumps({
        "bench": "vllm_engine", "machine": platform.node(), "cpus": torch.get_num_threads(),
        "params_m": round(params / 1e6, 2), "weights_mb": round(params * 4 / 1e6, 1),
        "engine_start_s": round(engine.start_s, 2), "samples": args.samples, "tokens": args.tokens,
        "generate_s": round(result["generate_s"], 3), "generated_tokens": result["generated_tokens"],
        "weight_load_s": round(result["weight_load_s"], 4),
        "logprob_max_abs_diff": float(f"{result['logprob_max_abs_diff']:.3g}"),
    }))


if __name__ == "__main__":
    main()

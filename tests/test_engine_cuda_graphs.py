"""Decode steps padded into CUDA-graph buckets give the same logits and tokens as the eager path.

On CPU the padded, static-buffer forward runs without capture (`capture=False`): it checks the bucketing, the
scratch block and the in-graph slot computation on any machine. On a GPU the captured graphs are checked too.
"""

from __future__ import annotations

import pytest
import torch

from budgetscope.engine.cuda_graphs import DecodeGraphs, batch_buckets
from budgetscope.engine.engine_config import EngineConfig
from budgetscope.engine.llm_engine import LLMEngine
from budgetscope.engine.sampling_params import SamplingParams
from budgetscope.engine.scheduler import ScheduledBatch


def test_batch_buckets():
    assert batch_buckets(1) == [1]
    assert batch_buckets(4) == [1, 2, 4]
    assert batch_buckets(32) == [1, 2, 4, 8, 16, 24, 32]
    assert batch_buckets(50) == [1, 2, 4, 8, 16, 24, 32, 48, 50]


def _engine(device="cpu", **kw) -> LLMEngine:
    cfg = dict(model="tiny", max_model_len=256, num_kv_blocks=64, max_num_seqs=8, device=device, dtype="float32")
    cfg.update(kw)
    return LLMEngine(EngineConfig(**cfg))


def _prompts():
    gen = torch.Generator().manual_seed(7)
    return [[256] + torch.randint(0, 256, (n,), generator=gen).tolist() for n in (5, 40, 17)]


def test_scratch_block_is_never_handed_out():
    engine = _engine()
    assert engine.kv_cache.scratch_block == engine.block_manager.num_blocks
    assert engine.kv_cache.layers[0][0].shape[0] == (engine.block_manager.num_blocks + 1) * engine.config.block_size


def test_padded_decode_gives_the_eager_tokens():
    params = SamplingParams(max_tokens=24, temperature=0, ignore_eos=True)
    eager = _engine()
    assert eager.runner.graphs is None  # CPU: no graphs by default
    want = [s.output_token_ids for s in eager.generate(_prompts(), params)]
    padded = _engine()
    padded.runner.graphs = DecodeGraphs(
        padded.model, padded.kv_cache, padded.device, max_batch=8, max_context=256, capture=False, context_step=32
    )
    got = [s.output_token_ids for s in padded.generate(_prompts(), params)]
    assert got == want
    assert padded.runner.graph_steps > 20  # decode steps really took the padded path (3 rows in a 4-row bucket)


def _decode_step(engine: LLMEngine) -> ScheduledBatch:
    """Prefill three prompts, then schedule one decode step of all three."""
    params = SamplingParams(max_tokens=8, temperature=0, ignore_eos=True)
    for p in _prompts():
        engine.add(engine.make_sequence(p, params))
    while True:
        batch = engine.scheduler.schedule()
        if all(n == 1 for n in batch.num_new_tokens):
            return batch
        engine.scheduler.postprocess(batch, engine.runner.run(batch), engine.eos_token_ids)


def _logits_both_ways(engine: LLMEngine, graphs: DecodeGraphs):
    batch = _decode_step(engine)
    runner = engine.runner
    with torch.inference_mode():
        prepared = runner.prepare(batch)
        hidden = runner.model(prepared.input_ids, prepared.positions, prepared, runner.kv_cache.layers)
        eager = runner.model.compute_logits(hidden[prepared.logits_rows])
        seqs, size = batch.seqs, runner.block_size
        pos = [s.num_computed_tokens for s in seqs]
        padded, greedy = graphs.run(
            [s.token_ids[p] for s, p in zip(seqs, pos)],
            pos,
            [s.block_table[p // size] * size + p % size for s, p in zip(seqs, pos)],
            [s.block_table for s in seqs],
            [p + 1 for p in pos],
        )
    assert greedy.tolist() == padded.argmax(dim=-1).tolist()
    return eager, padded


def test_padded_logits_match_eager():
    engine = _engine()
    graphs = DecodeGraphs(engine.model, engine.kv_cache, engine.device, 8, 256, capture=False, context_step=32)
    eager, padded = _logits_both_ways(engine, graphs)
    assert padded.shape == eager.shape == (3, engine.model_config.vocab_size)
    torch.testing.assert_close(padded, eager, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_captured_graphs_match_eager_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU here")
    engine = _engine(device="cuda", enforce_eager=True, attention_backend="sdpa")
    graphs = DecodeGraphs(engine.model, engine.kv_cache, engine.device, 8, 256, context_step=64)
    assert graphs.capture_all() == len(batch_buckets(8)) * 4 and graphs.num_graphs == 16
    eager, replayed = _logits_both_ways(engine, graphs)
    torch.testing.assert_close(replayed, eager, rtol=1e-3, atol=1e-3)
    captured = _engine(device="cuda", attention_backend="sdpa")
    assert isinstance(captured.runner.graphs, DecodeGraphs) and captured.runner.graphs.num_graphs > 0
    params = SamplingParams(max_tokens=16, temperature=0, ignore_eos=True)
    assert [s.output_token_ids for s in captured.generate(_prompts(), params)] == [
        s.output_token_ids for s in engine.generate(_prompts(), params)
    ]

"""One engine step: launch()/wait() (the asynchronous read-back) gives what run() gives."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from budgetscope.engine.engine_config import EngineConfig  # noqa: E402
from budgetscope.engine.llm_engine import LLMEngine  # noqa: E402
from budgetscope.engine.model_runner import PendingTokens  # noqa: E402
from budgetscope.engine.sampling_params import SamplingParams  # noqa: E402


def _engine(**kw) -> LLMEngine:
    cfg = dict(model="tiny", max_model_len=256, num_kv_blocks=64, max_num_seqs=8, device="cpu", dtype="float32",
               max_num_batched_tokens=64)
    cfg.update(kw)
    return LLMEngine(EngineConfig(**cfg))


def _prompts(lengths=(5, 40, 17), seed=7):
    gen = torch.Generator().manual_seed(seed)
    return [[256] + torch.randint(0, 256, (n,), generator=gen).tolist() for n in lengths]


def _drive_with_launch(engine: LLMEngine, prompts, params) -> list[list[int]]:
    """Step the engine by hand through runner.launch(...).wait(), as an engine process that overlaps would."""
    seqs = [engine.make_sequence(p, params) for p in prompts]
    for s in seqs:
        engine.add(s)
    while engine.has_work:
        batch = engine.scheduler.schedule()
        pending = engine.runner.launch(batch)
        assert isinstance(pending, PendingTokens)
        engine.scheduler.postprocess(batch, pending.wait(), engine.eos_token_ids)
    return [s.output_token_ids for s in seqs]


def test_launch_wait_gives_the_tokens_of_run():
    params = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
    want = [s.output_token_ids for s in _engine().generate(_prompts(), params)]
    assert _drive_with_launch(_engine(), _prompts(), params) == want


def test_pending_tokens_without_samples_is_empty():
    assert PendingTokens(None).wait() == []
    assert PendingTokens(torch.tensor([3, 1, 2])).wait() == [3, 1, 2]


def test_seeded_sampling_through_launch_is_reproducible():
    params = SamplingParams(max_tokens=8, temperature=0.8, top_p=0.9, seed=11, ignore_eos=True)
    first = _drive_with_launch(_engine(), _prompts(), params)
    assert first == _drive_with_launch(_engine(), _prompts(), params)
    assert all(len(ids) == 8 for ids in first)

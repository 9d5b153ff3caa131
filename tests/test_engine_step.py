"""One engine step: launch()/wait() (the asynchronous read-back) gives what run() gives."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from budgetscope.engine.engine_config import EngineConfig
from budgetscope.engine.llm_engine import LLMEngine
from budgetscope.engine.model_runner import PendingTokens
from budgetscope.engine.sampling_params import SamplingParams


def _engine(**kw) -> LLMEngine:
    cfg = dict(
        model="tiny",
        max_model_len=256,
        num_kv_blocks=64,
        max_num_seqs=8,
        device="cpu",
        dtype="float32",
        max_num_batched_tokens=64,
    )
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


class _Seq:
    """A fake sequence: just what pack_step reads."""

    def __init__(self, token_ids, computed, table):
        self.token_ids, self.num_computed_tokens, self.block_table = token_ids, computed, table


def test_pack_step_lays_out_a_padded_mixed_step():
    import numpy as np

    from budgetscope.engine.batch import StepShape, pack_step

    seqs = [
        _Seq(list(range(100, 120)), 19, [5, 9, 6, 4]),  # decode row at position 19 (third block)
        _Seq(list(range(200, 210)), 4, [3]),  # chunk of 3 after 4 cached, not sampled
        _Seq(list(range(300, 302)), 0, [7]),
    ]  # whole prompt of 2
    shape = StepShape(tokens=8, seqs=5, width=3, logits=4)
    out = np.full(shape.size + 3, -1, dtype=np.int64)
    pack_step(out, shape, seqs, [1, 3, 2], [True, False, True], block_size=8, scratch_block=11)
    b = shape.views(torch.from_numpy(out), 8)
    assert b.input_ids.tolist() == [119, 204, 205, 206, 300, 301, 0, 0]
    assert b.positions.tolist() == [19, 4, 5, 6, 0, 1, 0, 1]  # two padding tokens at the end
    assert b.slot_mapping.tolist() == [6 * 8 + 3, 3 * 8 + 4, 3 * 8 + 5, 3 * 8 + 6, 7 * 8, 7 * 8 + 1, 88, 89]
    assert b.query_start_loc.tolist() == [0, 1, 4, 6, 8, 8]  # then the padding sequence, then an empty one
    assert b.seq_lens.tolist() == [20, 7, 2, 2, 0]
    assert b.logits_rows.tolist() == [0, 5, 0, 0]
    assert b.block_tables.tolist() == [[5, 9, 6], [3, 11, 11], [7, 11, 11], [11, 11, 11], [11, 11, 11]]
    assert out[shape.size :].tolist() == [-1, -1, -1]  # nothing written past the shape
    assert all(span.start % 2 == 0 for span in shape.spans().values())  # 16-byte aligned fields


def test_attention_backend_choice():
    from budgetscope.engine.llm_engine import attention_backend

    cpu = torch.device("cpu")
    assert attention_backend(EngineConfig(), cpu) == "sdpa"  # auto on a CPU
    assert attention_backend(EngineConfig(attention_backend="sdpa"), torch.device("cuda")) == "sdpa"
    assert attention_backend(EngineConfig(compile=True), torch.device("cuda")) == "sdpa"
    with pytest.raises(ValueError, match="attention_backend must be one of auto, triton, sdpa, not 'flash'"):
        EngineConfig(attention_backend="flash")
    with pytest.raises(ValueError, match="--compile works with --attention sdpa only"):
        attention_backend(EngineConfig(attention_backend="triton", compile=True), cpu)


def test_triton_backend_refused_on_a_cpu_without_the_interpreter(monkeypatch):
    from budgetscope.engine import llm_engine

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    pytest.importorskip("triton")
    with pytest.raises(ValueError, match="needs a CUDA device"):
        llm_engine.attention_backend(EngineConfig(attention_backend="triton"), torch.device("cpu"))

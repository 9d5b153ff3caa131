"""The engine with the "triton" attention backend (paged kernel, packed metadata, fused norms) gives the greedy
tokens of the "sdpa" backend; its padded every-step graph path (capture=False) gives those of its eager path.

Without a CUDA GPU the kernels run in Triton's CPU interpreter (slow: the workloads are small).
"""

from __future__ import annotations

import pytest

from triton_setup import kernel_device

DEVICE = kernel_device()
torch = pytest.importorskip("torch")

from budgetscope.engine.cuda_graphs import StepGraphs, token_buckets
from budgetscope.engine.engine_config import EngineConfig
from budgetscope.engine.llm_engine import LLMEngine
from budgetscope.engine.sampling_params import SamplingParams


def _engine(attention: str, **kw) -> LLMEngine:
    cfg = dict(
        model="tiny",
        max_model_len=256,
        num_kv_blocks=64,
        max_num_seqs=4,
        device=DEVICE,
        dtype="float32",
        max_num_batched_tokens=24,
        attention_backend=attention,
        enforce_eager=True,
    )
    cfg.update(kw)
    return LLMEngine(EngineConfig(**cfg))


def _prompts():
    gen = torch.Generator().manual_seed(5)
    shared = torch.randint(0, 256, (34,), generator=gen).tolist()
    first = [[256] + shared, [256] + torch.randint(0, 256, (6,), generator=gen).tolist()]
    # later: a prefix-cache hit on the first prompt's two full blocks, and a short one
    second = [[256] + shared[:33] + [7, 8, 9, 10, 11], [256, 1, 2]]
    return first, second


def _run(engine: LLMEngine) -> list[list[int]]:
    """Two rounds (the second hits the prefix cache); a 24-token budget mixes decode rows and prefill chunks."""
    params = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True)
    first, second = _prompts()
    out = [s.output_token_ids for s in engine.generate(first, params)]
    seqs = engine.generate(second, params)
    assert seqs[0].num_cached_tokens == 32  # the hit really happened
    return out + [s.output_token_ids for s in seqs]


@pytest.fixture(scope="module")
def eager_tokens() -> list[list[int]]:
    """The "triton" backend's eager tokens, run once for the tests that compare with them (~10 s a run in the
    CPU interpreter)."""
    return _run(_engine("triton"))


def test_triton_backend_gives_the_sdpa_tokens(eager_tokens):
    engine = _engine("triton")
    assert engine.attention_backend == "triton" and engine.runner.step_buffer is not None
    layer = engine.model.model.layers[0]
    assert engine.model.model.norm.fused and layer.self_attn.fused and layer.mlp.fused  # every Triton fusion on
    assert eager_tokens == _run(_engine("sdpa"))


def test_padded_step_path_gives_the_eager_tokens(eager_tokens):
    want = eager_tokens
    engine = _engine("triton")
    engine.runner.graphs = StepGraphs(
        engine.model, engine.kv_cache, engine.device, max_seqs=4, max_tokens=24, max_model_len=256, capture=False
    )
    engine.runner.step_buffer = engine.runner.graphs.buffer
    assert _run(engine) == want
    assert engine.runner.graph_steps > 10  # every step went through the padded path


def test_async_scheduling_through_the_padded_step_path(eager_tokens):
    """Step N+1 launched before step N's tokens are read: decode rows gather their input inside the padded step
    (from StepGraphs' static sampled-id buffer, as a captured graph would); the same tokens."""
    want = eager_tokens
    engine = _engine("triton", async_scheduling=True)
    engine.runner.graphs = StepGraphs(
        engine.model, engine.kv_cache, engine.device, max_seqs=4, max_tokens=24, max_model_len=256, capture=False
    )
    engine.runner.step_buffer, engine.runner.sampled = engine.runner.graphs.buffer, engine.runner.graphs.sampled
    gathered = []
    launch = engine.runner.launch
    engine.runner.launch = lambda batch: gathered.extend(i >= 0 for i in batch.inflight_src) or launch(batch)
    assert _run(engine) == want
    assert engine.runner.graph_steps > 10 and sum(gathered) > 5
    assert engine.block_manager.num_used_blocks == 0


def test_token_buckets():
    assert token_buckets(4, 24) == [1, 2, 4, 24]
    assert token_buckets(64, 512) == [1, 2, 4, 8, 16, 24, 32, 48, 64, 128, 192, 256, 320, 384, 448, 512]
    assert token_buckets(8, 1100)[-4:] == [512, 768, 1024, 1100]


@pytest.mark.gpu
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_captured_step_graphs_give_the_eager_tokens_on_cuda(async_scheduling):
    """Every step (prefill chunks, mixed, decode) replayed from a CUDA graph gives the eager kernel's tokens; with
    async scheduling the in-flight inputs are gathered inside the graph."""
    if DEVICE != "cuda":
        pytest.skip("no CUDA GPU here")
    want = _run(_engine("triton"))
    engine = _engine("triton", enforce_eager=False, async_scheduling=async_scheduling)
    graphs = engine.runner.graphs
    assert isinstance(graphs, StepGraphs) and graphs.num_graphs == len(token_buckets(4, 24))
    assert _run(engine) == want
    assert engine.runner.graph_steps > 10


@pytest.mark.gpu
@pytest.mark.parametrize("eager", [False, True])
def test_launch_does_not_synchronise_on_cuda(eager):
    """Nothing in a triton step waits for the GPU before wait(): torch's sync debug mode raises on any sync."""
    if DEVICE != "cuda":
        pytest.skip("no CUDA GPU here")
    engine = _engine("triton", enforce_eager=eager)
    params = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True)
    for prompt in _prompts()[0]:
        engine.add(engine.make_sequence(prompt, params))
    launched = 0
    while engine.has_work:
        batch = engine.scheduler.schedule()
        torch.cuda.set_sync_debug_mode("error")
        try:
            pending = engine.runner.launch(batch)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        engine.scheduler.postprocess(batch, pending.wait(), engine.eos_token_ids)
        launched += 1
    assert launched > 5


@pytest.mark.gpu
@pytest.mark.parametrize("eager", [False, True])
def test_async_launch_does_not_synchronise_on_cuda(eager):
    """Async scheduling: launching step N+1 (its inputs gathered from step N's ids on the device) never waits."""
    if DEVICE != "cuda":
        pytest.skip("no CUDA GPU here")
    engine = _engine("triton", enforce_eager=eager, async_scheduling=True)
    params = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True)
    for prompt in _prompts()[0]:
        engine.add(engine.make_sequence(prompt, params))
    gathered = 0
    while engine.has_work:
        torch.cuda.set_sync_debug_mode("error")
        try:
            launched = engine.launch_step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        gathered += sum(i >= 0 for i in launched.batch.inflight_src)
        engine.finish_step(launched)
    assert gathered > 5 and engine.block_manager.num_used_blocks == 0


@pytest.mark.gpu
@pytest.mark.parametrize("eager", [False, True])
def test_split_kv_gives_the_unsplit_tokens_on_cuda(eager, monkeypatch):
    """Split-KV on for every step of the workload (24 tokens at most), eager and replayed from captured graphs
    (each bucket captured with its own split count), gives the unsplit engine's greedy tokens."""
    if DEVICE != "cuda":
        pytest.skip("no CUDA GPU here")
    from budgetscope.engine import paged_attention

    want = _run(_engine("triton"))
    monkeypatch.setitem(paged_attention.SPLIT, "max_splits", 32)
    monkeypatch.setitem(paged_attention.SPLIT, "max_tokens", 24)
    engine = _engine("triton", enforce_eager=eager)
    assert paged_attention.kv_splits(1, engine.model_config.num_key_value_heads) == 32
    assert _run(engine) == want

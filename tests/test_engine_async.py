"""Async scheduling: step N+1 scheduled and launched before step N's tokens are read back gives, token for token,
what the synchronous engine gives, emits nothing for a finished sequence, counts every token and step once, and
frees every block. On a CPU launch() computes the step, but the ordering (and the gather of in-flight inputs from
the previous step's sampled-id tensor) is the same as on a GPU."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from budgetscope.engine.batch import StepShape, gather_inflight, pack_step
from budgetscope.engine.cuda_graphs import DecodeGraphs
from budgetscope.engine.engine_config import EngineConfig
from budgetscope.engine.llm_engine import LLMEngine
from budgetscope.engine.sampling_params import SamplingParams
from budgetscope.engine.telemetry import Telemetry
from budgetscope.instrument import Instrumentation
from test_engine_step import _engine as _cpu_engine

SMALL = dict(max_model_len=160, max_num_seqs=6, max_num_batched_tokens=48)  # on test_engine_step's tiny CPU engine


def _engine(async_scheduling: bool, **kw) -> LLMEngine:
    return _cpu_engine(**{**SMALL, **kw, "async_scheduling": async_scheduling})


class FakeTrace:
    """A fake request trace: counts token() calls and marks, and flags a token after the sequence finished."""

    def __init__(self):
        self.tokens = 0
        self.marks: list[str] = []

    def mark(self, stage: str) -> None:
        self.marks.append(stage)

    def token(self) -> None:
        self.tokens += 1

    def set(self, key, value) -> None:
        pass

    def finish(self, **_) -> None:
        pass


class Outputs:
    """Every on_output call per request: (tokens so far, finished); `late` counts calls after the finish."""

    def __init__(self):
        self.calls: dict[str, list[tuple[int, bool]]] = {}
        self.late = 0

    def __call__(self, seq) -> None:
        calls = self.calls.setdefault(seq.request_id, [])
        if calls and calls[-1][1]:
            self.late += 1
        calls.append((seq.num_output_tokens, seq.is_finished))


def _prompts(seed=7):
    gen = torch.Generator().manual_seed(seed)
    shared = torch.randint(0, 256, (40,), generator=gen).tolist()  # two full blocks and a bit: prefix-cache hits
    own = [torch.randint(0, 256, (n,), generator=gen).tolist() for n in (3, 20, 57, 9, 30, 1, 12)]
    return [shared + own[0], own[1], shared + own[2], own[3], own[4], shared + own[5], own[6]]


MAX_TOKENS = (9, 30, 4, 25, 1, 14, 40)  # 1 and 4: length hits in the first steps


def _run(engine: LLMEngine, eos: int | None = None, abort_at=("r1", 3), expire_at=("r6", 2)):
    """The mixed workload, stepped by hand: requests arrive over the first steps, r1 is aborted once it has 3
    tokens and r6's deadline passes once it has 2 (both decided on tokens seen, so the same in both modes).
    Returns (sequences, Outputs, steps launched)."""
    if eos is not None:
        engine.eos_token_ids = {eos}
    out = Outputs()
    seqs = [
        engine.make_sequence(
            p,
            SamplingParams(max_tokens=m, temperature=0, ignore_eos=i % 2 == 0),
            request_id=f"r{i}",
            trace=FakeTrace(),
            on_output=out,
        )
        for i, (p, m) in enumerate(zip(_prompts(), MAX_TOKENS))
    ]
    by_id = {s.request_id: s for s in seqs}
    launches = []
    launch = engine.runner.launch

    def counting_launch(batch):
        launches.append(list(batch.inflight_src))
        return launch(batch)

    engine.runner.launch = counting_launch
    pending, steps = list(seqs), 0
    while pending or engine.has_work:
        if pending and steps % 2 == 0:  # arrivals spread over the steps
            engine.add(pending.pop(0))
        engine.step()
        steps += 1
        victim = by_id[abort_at[0]]
        if not victim.is_finished and victim.num_output_tokens >= abort_at[1]:
            engine.abort(victim)
        late = by_id[expire_at[0]]
        if late.deadline_ns is None and late.num_output_tokens >= expire_at[1]:
            late.deadline_ns = time.time_ns()
        assert steps < 500
    return seqs, out, launches


@pytest.fixture(scope="module")
def eos_token() -> int:
    """A token r3 (which stops at EOS) emits first mid-generation: made the EOS of both runs."""
    seqs, _, _ = _run(_engine(False), abort_at=("r1", 999), expire_at=("r6", 999))
    ids = seqs[3].output_token_ids
    return next(t for i, t in enumerate(ids) if i >= 3 and t not in ids[:i])


@pytest.fixture(scope="module")
def both_runs(eos_token):
    sync, async_ = _engine(False), _engine(True)
    return (sync, *_run(sync, eos_token)), (async_, *_run(async_, eos_token))


def test_async_tokens_equal_sync_tokens_over_a_mixed_workload(both_runs):
    (sync, s_seqs, _, _), (asy, a_seqs, _, launches) = both_runs
    assert [s.output_token_ids for s in a_seqs] == [s.output_token_ids for s in s_seqs]
    assert [(s.finish_reason, s.outcome) for s in a_seqs] == [(s.finish_reason, s.outcome) for s in s_seqs]
    reasons = {s.finish_reason for s in a_seqs}
    assert reasons == {"stop", "length", "abort", "timeout"}  # every way to end took part
    assert any(s.finish_reason == "stop" and s.num_output_tokens < s.params.max_tokens for s in a_seqs)
    assert sum(s.num_cached_tokens for s in a_seqs) > 0  # prefix-cache hits
    # the gather really ran: decode rows took their input from the previous step's sampled ids on the device
    assert sum(src >= 0 for step in launches for src in step) > 20
    assert asy.async_scheduling and not sync.async_scheduling


def test_no_token_is_emitted_for_a_finished_sequence(both_runs):
    _, (_, seqs, out, _) = both_runs
    assert out.late == 0
    for seq in seqs:
        calls = out.calls[seq.request_id]
        counts = [n for n, _ in calls]
        aborted = seq.finish_reason == "abort"  # abort() calls no on_output: its caller knows
        assert counts == sorted(counts) and calls[-1] == (seq.num_output_tokens, not aborted)
        assert seq.num_output_tokens <= seq.params.max_tokens
        assert seq.num_inflight_tokens == 0
    aborted = next(s for s in seqs if s.request_id == "r1")
    assert aborted.num_output_tokens == 3  # its 4th token was in flight at the abort: dropped
    expired = next(s for s in seqs if s.request_id == "r6")
    assert expired.outcome == "timeout" and expired.num_output_tokens == 2


def test_token_counts_and_freed_blocks(both_runs):
    for engine, seqs, _, _ in both_runs:
        assert all(s.trace.tokens == s.num_output_tokens for s in seqs)
        assert engine.metrics.generation_tokens == sum(s.num_output_tokens for s in seqs)
        assert engine.block_manager.num_used_blocks == 0 and not engine.has_work
        assert len(engine.block_manager.free_ids) == engine.block_manager.num_blocks


def test_a_wrong_gather_changes_the_tokens(eos_token, both_runs):
    """The workload is sensitive to the gather: feeding decode rows another row's token changes the outputs."""
    (_, want, _, _), _ = both_runs
    engine = _engine(True)
    keep = engine.runner._keep

    def shifted(ids):
        return keep(None if ids is None else ids.roll(1))  # each row's next input taken from its neighbour

    engine.runner._keep = shifted
    seqs, _, _ = _run(engine, eos_token)
    assert [s.output_token_ids for s in seqs] != [s.output_token_ids for s in want]


def test_preemption_under_a_tiny_kv_cache_falls_back_to_a_sync_step():
    """Six sequences of 20 + 40 tokens in 12 blocks of 16: preempted and recomputed, the same tokens as sync."""
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 256, (20,), generator=gen).tolist() for _ in range(6)]
    params = SamplingParams(max_tokens=40, temperature=0, ignore_eos=True)
    results, fallbacks = [], []
    for async_scheduling in (False, True):
        engine = _engine(async_scheduling, num_kv_blocks=12)
        schedule = engine.scheduler.schedule

        def recording_schedule(may_preempt=True):
            batch = schedule(may_preempt)
            fallbacks.append(batch.needs_sync)
            return batch

        engine.scheduler.schedule = recording_schedule
        seqs = engine.generate(prompts, params)
        results.append([s.output_token_ids for s in seqs])
        assert engine.scheduler.num_preemptions > 0
        assert engine.block_manager.num_used_blocks == 0
        assert all(s.num_output_tokens == 40 for s in seqs)
    assert results[0] == results[1]
    assert any(fallbacks)  # async: a schedule around a step in flight needed a preemption, and fell back


def test_step_spans_count_each_launched_step_once():
    exporter = InMemorySpanExporter()
    tel = Telemetry(Instrumentation(service_name="budgetscope-engine", exporter=exporter))
    engine = LLMEngine(EngineConfig(model="tiny", device="cpu", num_kv_blocks=32, async_scheduling=True), tel)
    launched = []
    launch = engine.runner.launch
    engine.runner.launch = lambda batch: launched.append(batch) or launch(batch)
    params = [SamplingParams(max_tokens=m, temperature=0, ignore_eos=True) for m in (3, 8, 1)]
    seqs = engine.generate([[1, 2, 3], list(range(5, 40)), [9] * 17], params)
    tel.flush()
    spans = exporter.get_finished_spans()
    steps = [s for s in spans if s.name == "engine.step"]
    assert len(steps) == engine.metrics.steps == len(launched)
    roots = sorted(s.attributes["gen_ai.usage.output_tokens"] for s in spans if s.kind is SpanKind.SERVER)
    assert roots == [1, 3, 8] and [s.num_output_tokens for s in seqs] == [3, 8, 1]


def test_pack_step_gathers_in_flight_inputs():
    """A decode row whose input is in flight gets id 0 and prev_index its row of the last sampled ids; the gather
    puts that id in place and leaves every other row alone."""
    import numpy as np

    class Seq:
        def __init__(self, token_ids, computed, table):
            self.token_ids, self.num_computed_tokens, self.block_table = token_ids, computed, table

    seqs = [Seq([5, 6, 7], 3, [2]), Seq([8, 9, 10, 11], 1, [4]), Seq([1, 2], 2, [3])]
    shape = StepShape(tokens=6, seqs=4, width=1, logits=3)
    out = np.zeros(shape.size, dtype=np.int64)
    pack_step(out, shape, seqs, [1, 3, 1], [True, True, True], 8, 9, inflight_src=[2, -1, 0])
    b = shape.views(torch.from_numpy(out), 8)
    assert b.input_ids.tolist() == [0, 9, 10, 11, 0, 0]
    assert b.prev_index.tolist() == [2, -1, -1, -1, 0, -1]
    assert b.positions.tolist()[:5] == [3, 1, 2, 3, 2]
    sampled = torch.tensor([70, 71, 72, 0, 0])
    assert gather_inflight(b.input_ids, b.prev_index, sampled).tolist() == [72, 9, 10, 11, 70, 0]
    assert gather_inflight(b.input_ids, None, sampled) is b.input_ids


def test_padded_decode_graphs_gather_in_flight_inputs():
    """The sdpa decode graphs' static-buffer forward (capture=False on a CPU) with async scheduling: same tokens."""
    prompts = _prompts()[:4]
    params = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
    want = [s.output_token_ids for s in _engine(False).generate(prompts, params)]
    padded = _engine(True)
    graphs = DecodeGraphs(padded.model, padded.kv_cache, padded.device, 6, 160, capture=False, context_step=32)
    padded.runner.graphs, padded.runner.sampled = graphs, graphs.sampled
    assert [s.output_token_ids for s in padded.generate(prompts, params)] == want
    assert padded.runner.graph_steps > 10


def _metric(text: str, name: str) -> float:
    return float(next(line.split()[-1] for line in text.splitlines() if line.startswith(f"budgetscope_engine_{name} ")))


def test_engine_serve_with_async_scheduling_gives_the_sync_tokens(tmp_path):
    """The whole split: `engine serve --async-scheduling` (engine process, CPU) answers concurrent streaming and
    non-streaming requests with the texts of the synchronous engine offline, counts every token once, records one
    engine.step span per step, frees every block, and stops cleanly on SIGTERM."""
    import json
    import threading

    httpx = pytest.importorskip("httpx")
    from engine_fixtures import wait_for
    from test_sigterm import _free_port, _spawn, _terminate, _wait_ready

    prompts = [[256, 104, 105], list(range(1, 40)), list(range(1, 40)) + [9, 8, 7], [256] + [7] * 20]
    max_tokens = [12, 5, 9, 20]
    offline = _engine(False, max_model_len=512)
    params = [SamplingParams(max_tokens=m, temperature=0, ignore_eos=True) for m in max_tokens]
    want = [offline.tokenizer.decode(s.output_token_ids) for s in offline.generate(prompts, params)]
    spans = tmp_path / "spans.jsonl"
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _spawn(
        ["-m", "budgetscope.cli", "engine", "serve", "--config", "tiny", "--device", "cpu", "--port", str(port)]
        + ["--max-model-len", "512", "--kv-blocks", "64", "--max-seqs", "6", "--async-scheduling"]
        + ["--exporter", f"jsonl:{spans}", "--log-level", "info"],
        {},
        tmp_path,
    )
    try:
        _wait_ready(f"{base}/health", proc, timeout_s=90)
        texts: dict[int, str] = {}

        def ask(i: int) -> None:
            body = {"prompt": prompts[i], "max_tokens": max_tokens[i], "temperature": 0, "ignore_eos": True}
            if i % 2:
                with httpx.stream("POST", f"{base}/v1/completions", json={**body, "stream": True}, timeout=60) as r:
                    chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
                texts[i] = "".join(c["choices"][0]["text"] for c in chunks if c.get("choices"))
            else:
                texts[i] = httpx.post(f"{base}/v1/completions", json=body, timeout=60).json()["choices"][0]["text"]

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert [texts.get(i) for i in range(len(prompts))] == want
        assert wait_for(lambda: _metric(httpx.get(f"{base}/metrics").text, "kv_blocks_used") == 0)
        metrics = httpx.get(f"{base}/metrics").text
        assert _metric(metrics, "generation_tokens_total") == sum(max_tokens)
        steps = _metric(metrics, "steps_total")
    finally:
        code, err = _terminate(proc)
    assert code == 0, err
    assert "async scheduling" in err  # the engine process's start line
    records = [json.loads(line) for line in spans.read_text().splitlines()]
    assert sum(json.dumps(r).count('"engine.step"') for r in records) == steps > 0


def test_step_n_plus_1_is_launched_before_step_n_is_read_back():
    """The ordering itself: with async scheduling every step after the first is launched before the tokens of the
    step before it are waited for; without it, each step is waited for before the next launch."""
    from budgetscope.engine.model_runner import PendingTokens

    params = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True)
    timelines = []
    for async_scheduling in (False, True):
        engine, timeline = _engine(async_scheduling), []
        launch = engine.runner.launch

        class Pending(PendingTokens):
            def __init__(self, pending, k):
                self.pending, self.k = pending, k

            def wait(self):
                timeline.append(f"W{self.k}")
                return self.pending.wait()

        def recording_launch(batch):
            k = sum(x[0] == "L" for x in timeline) + 1
            timeline.append(f"L{k}")
            return Pending(launch(batch), k)

        engine.runner.launch = recording_launch
        engine.generate([[1, 2, 3], [4, 5, 6, 7]], params)
        timelines.append(timeline)
    sync, async_ = timelines
    assert sync == [x for k in range(1, 7) for x in (f"L{k}", f"W{k}")]  # a prefill step, then five decode steps
    assert async_ == ["L1"] + [x for k in range(2, 7) for x in (f"L{k}", f"W{k - 1}")] + ["W6"]


def test_seeded_sampling_is_the_same_with_async_scheduling():
    """Each seeded request draws from its own generator once per step it gets a token in: the same draws either way."""
    params = SamplingParams(max_tokens=10, temperature=0.9, top_p=0.95, seed=11, ignore_eos=True)
    prompts = _prompts()[:4]
    got = [[s.output_token_ids for s in _engine(a).generate(prompts, params)] for a in (False, True)]
    assert got[0] == got[1] and all(len(ids) == 10 for ids in got[0])

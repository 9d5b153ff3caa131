"""Scheduler and block manager, without a model: token budget, chunking, preemption, prefix hits, priority."""

from budgetscope.engine.block_manager import BlockManager
from budgetscope.engine.engine_config import EngineConfig
from budgetscope.engine.sampling_params import SamplingParams
from budgetscope.engine.scheduler import Scheduler
from budgetscope.engine.sequence import Sequence, SequenceStatus

EOS = {257}


def make(blocks=64, **kw):
    kw.setdefault("max_model_len", 256)
    cfg = EngineConfig(num_kv_blocks=blocks, block_size=4, **kw)
    bm = BlockManager(cfg.num_kv_blocks, cfg.block_size)
    return Scheduler(cfg, bm), bm


def seq(n, tier="default", max_tokens=8, start=0, arrival=None, cfg=EngineConfig()):
    return Sequence(
        list(range(start, start + n)),
        SamplingParams(max_tokens=max_tokens, ignore_eos=True),
        tier=tier,
        priority=cfg.priority_of(tier),
        arrival_ns=arrival,
    )


def run_step(sched, token=7):
    """schedule + postprocess with a fixed sampled token; returns the batch."""
    batch = sched.schedule()
    sampled = [token] * sum(batch.is_sampled)
    sched.postprocess(batch, sampled, EOS)
    return batch


def test_token_budget_caps_a_step_and_chunks_the_prompt():
    sched, _ = make(max_num_batched_tokens=10, max_num_seqs=4)
    s = seq(25)
    sched.add(s)
    sizes = [run_step(sched).num_new_tokens for _ in range(3)]
    assert sizes == [[10], [10], [5]]
    assert s.num_output_tokens == 1  # sampled only once the whole prompt was in


def test_decodes_go_first_then_prefill_chunks_fill_the_budget():
    sched, _ = make(max_num_batched_tokens=8, max_num_seqs=4)
    a, b = seq(3, arrival=1), seq(20, arrival=2)
    sched.add(a)
    run_step(sched)  # a prefilled (3 tokens), b admitted with the 5 left
    sched.add(b)
    batch = run_step(sched)
    assert [(s.request_id, n) for s, n in zip(batch.seqs, batch.num_new_tokens)] == [
        (a.request_id, 1),
        (b.request_id, 7),
    ]
    assert batch.num_decode_seqs == 1 and batch.num_prefill_tokens == 7


def test_without_chunked_prefill_a_prompt_is_scheduled_whole():
    sched, _ = make(max_num_batched_tokens=10, max_num_seqs=4, enable_chunked_prefill=False, max_model_len=64)
    s = seq(50)
    sched.add(s)
    batch = run_step(sched)
    assert batch.num_new_tokens == [50]


def test_max_num_seqs_bounds_the_running_batch():
    sched, _ = make(max_num_batched_tokens=64, max_num_seqs=2)
    for i in range(3):
        sched.add(seq(4, start=100 * i, arrival=i))
    run_step(sched)
    assert sched.num_running == 2 and sched.num_waiting == 1


def test_interactive_tier_is_scheduled_before_earlier_batch_requests():
    sched, _ = make(max_num_batched_tokens=64, max_num_seqs=1)
    late_interactive = seq(4, tier="interactive", arrival=10, start=50)
    sched.add(seq(4, tier="batch", arrival=1))
    sched.add(seq(4, tier="default", arrival=2, start=20))
    sched.add(late_interactive)
    batch = run_step(sched)
    assert batch.seqs == [late_interactive]


def test_prefix_hit_skips_cached_full_blocks_and_is_counted():
    sched, bm = make(max_num_batched_tokens=64, max_num_seqs=4)
    first = seq(10, max_tokens=1)
    sched.add(first)
    run_step(sched)
    assert first.is_finished and bm.num_used_blocks == 0
    second = Sequence(list(range(10)) + [99, 98], SamplingParams(max_tokens=1))
    sched.add(second)
    batch = run_step(sched)
    assert second.num_cached_tokens == 8  # two full blocks of 4 from `first`
    assert batch.num_new_tokens == [4]


def test_prefix_hit_always_leaves_the_last_token_to_compute():
    sched, _ = make()
    sched.add(seq(8, max_tokens=1))
    run_step(sched)
    again = seq(8, max_tokens=1)
    sched.add(again)
    batch = run_step(sched)
    assert again.num_cached_tokens == 4 and batch.num_new_tokens == [4]


def test_out_of_blocks_preempts_the_least_important_by_recompute():
    sched, bm = make(blocks=8, max_num_batched_tokens=64, max_num_seqs=4)
    a = seq(8, tier="interactive", max_tokens=20, arrival=1)
    b = seq(8, tier="batch", max_tokens=20, arrival=2, start=100)
    sched.add(a)
    sched.add(b)
    run_step(sched)  # 2 + 2 blocks, prompts in, one token each
    preempted = []
    for _ in range(20):
        preempted += run_step(sched).preempted
        if preempted:
            break
    assert preempted == [b]
    assert b.status is SequenceStatus.WAITING and b.block_table == [] and b.num_computed_tokens == 0
    assert b.num_output_tokens >= 1  # its output is kept and recomputed
    assert sched.num_preemptions == 1
    while not a.is_finished:
        run_step(sched)
    while not b.is_finished:
        run_step(sched)
    assert b.num_output_tokens == 20 and bm.num_used_blocks == 0


def test_a_waiting_interactive_request_preempts_running_batch_work():
    sched, _ = make(blocks=4, max_num_batched_tokens=64, max_num_seqs=4)
    batch_seq = seq(12, tier="batch", max_tokens=4, arrival=1)
    sched.add(batch_seq)
    run_step(sched)
    urgent = seq(8, tier="interactive", max_tokens=2, arrival=2, start=100)
    sched.add(urgent)
    step = run_step(sched)
    assert step.preempted == [batch_seq] and step.seqs == [urgent]
    assert batch_seq.status is SequenceStatus.WAITING and batch_seq.num_preemptions == 1
    while not urgent.is_finished:
        run_step(sched)
    while not batch_seq.is_finished:
        run_step(sched)
    assert batch_seq.num_output_tokens == 4


def test_abort_frees_blocks_and_leaves_no_leak():
    sched, bm = make(max_num_batched_tokens=16, max_num_seqs=8)
    seqs = [seq(9, start=10 * i, max_tokens=30, arrival=i) for i in range(6)]
    for s in seqs:
        sched.add(s)
    for _ in range(3):
        run_step(sched)
    assert bm.num_used_blocks > 0
    for s in seqs:
        sched.finish(s, "abort", "cancelled")
    assert bm.num_used_blocks == 0 and not sched.has_work
    assert sorted(bm.free_ids) == list(range(bm.num_blocks))
    assert all(b.ref_count == 0 for b in bm.blocks)


def test_shared_prefix_blocks_are_reference_counted():
    sched, bm = make(max_num_batched_tokens=64)
    a = seq(9, max_tokens=5)
    sched.add(a)
    run_step(sched)
    b = seq(9, max_tokens=5)
    sched.add(b)
    run_step(sched)
    shared = set(a.block_table) & set(b.block_table)
    assert len(shared) == 2 and all(bm.blocks[i].ref_count == 2 for i in shared)
    sched.finish(a, "abort", "cancelled")
    assert all(bm.blocks[i].ref_count == 1 for i in shared)
    sched.finish(b, "abort", "cancelled")
    assert bm.num_used_blocks == 0


def test_lru_eviction_reuses_cached_blocks_oldest_first():
    bm = BlockManager(num_blocks=4, block_size=4)
    old, new = seq(5, start=0), seq(5, start=50)
    for s in (old, new):
        assert bm.allocate(s, 5)
        s.num_computed_tokens = 5
        bm.commit(s)
        bm.free(s)
    assert len(bm.hash_to_block) == 2
    grab = seq(9, start=200)
    assert bm.allocate(grab, 9)  # 3 blocks: 2 uncached first, then the oldest cached one
    assert bm.match_prefix(seq(5, start=0)) == []
    assert len(bm.match_prefix(seq(5, start=50))) == 1
    assert bm.num_evictions == 1


def test_deadline_expiry_finishes_with_timeout():
    sched, bm = make()
    s = seq(6, max_tokens=100)
    s.deadline_ns = 1
    sched.add(s)
    run_step(sched)
    assert sched.expire(now_ns=2) == [s]
    assert s.outcome == "timeout" and s.finish_reason == "timeout" and bm.num_used_blocks == 0


def test_stop_reasons_eos_and_length():
    sched, _ = make()
    eos_seq = Sequence([1, 2, 3], SamplingParams(max_tokens=5))
    sched.add(eos_seq)
    run_step(sched, token=257)
    assert eos_seq.finish_reason == "stop" and eos_seq.outcome == "ok"
    length_seq = seq(3, max_tokens=2, start=40)
    sched.add(length_seq)
    run_step(sched)
    run_step(sched)
    assert length_seq.finish_reason == "length" and length_seq.num_output_tokens == 2


def test_a_waiting_sequence_that_preempts_a_later_one_of_its_tier_is_admitted_and_schedule_returns():
    """The victim used to go to the front of the queue, before the one that preempted it: it was admitted again
    at once, preempted again, and schedule() never returned (an engine spinning at 100 % CPU)."""
    import threading

    from budgetscope.engine.block_manager import BlockManager
    from budgetscope.engine.engine_config import EngineConfig
    from budgetscope.engine.scheduler import Scheduler
    from budgetscope.engine.sequence import Sequence

    config = EngineConfig(
        model="tiny", num_kv_blocks=4, block_size=16, max_model_len=128, max_num_seqs=4, enable_prefix_caching=False
    )
    sched = Scheduler(config, BlockManager(4, 16, False))
    later = Sequence(list(range(1, 41)), arrival_ns=2)
    sched.add(later)
    sched.schedule()
    assert sched.running == [later]  # 3 of the 4 blocks
    earlier = Sequence(list(range(1, 41)), arrival_ns=1)  # more important: it arrived first
    sched.add(earlier)
    result = []
    thread = threading.Thread(target=lambda: result.append(sched.schedule()), daemon=True)
    thread.start()
    thread.join(10)
    assert result, "schedule() did not return"
    assert sched.running == [earlier] and sched.waiting[1][0] is later

"""Plans: arrival processes, length distributions, mixes, shared prefixes, prompts, replay files."""

import random
import statistics

import pytest

from budgetscope.loadgen import (
    Arrivals,
    Distribution,
    LoadgenError,
    Mix,
    Prompts,
    SharedPrefix,
    Workload,
    build_plan,
    read_replay,
)


def gaps_s(offsets):
    return [(b - a) / 1e9 for a, b in zip(offsets, offsets[1:])]


def cv(xs):
    return statistics.pstdev(xs) / statistics.fmean(xs)


@pytest.mark.parametrize(
    "spec, expected_cv", [("poisson", 1.0), ("constant", 0.0), ("gamma:cv=3", 3.0), ("gamma:cv=0.5", 0.5)]
)
def test_arrivals_have_the_rate_and_burstiness_asked_for(spec, expected_cv):
    offsets = Arrivals.parse(spec, rate=200).offsets_ns(random.Random(1), num_requests=40_000)
    gaps = gaps_s(offsets)
    assert offsets[0] == 0
    assert 1 / statistics.fmean(gaps) == pytest.approx(200, rel=0.05)
    assert cv(gaps) == pytest.approx(expected_cv, abs=0.03 + 0.05 * expected_cv)


def test_constant_arrivals_are_evenly_spaced():
    offsets = Arrivals.parse("constant", rate=4).offsets_ns(random.Random(0), num_requests=5)
    assert offsets == [0, 250_000_000, 500_000_000, 750_000_000, 1_000_000_000]


def test_duration_bounds_the_plan():
    offsets = Arrivals.parse("poisson", rate=100).offsets_ns(random.Random(3), duration_s=10)
    assert max(offsets) < 10e9
    assert 900 < len(offsets) < 1100


@pytest.mark.parametrize("spec", ["gamma", "gamma:cv=0", "pareto", "poisson:2", "constant:cv=1"])
def test_bad_arrival_specs_are_refused(spec):
    with pytest.raises(LoadgenError):
        Arrivals.parse(spec, rate=1)


def test_zero_rate_is_refused():
    with pytest.raises(LoadgenError, match="rate"):
        Arrivals.parse("poisson", rate=0)


def test_same_seed_same_plan_and_different_seed_different_plan():
    workload = Workload(
        Distribution.parse("uniform:10,500"),
        Distribution.parse("lognormal:median=64,sigma=1"),
        Mix.parse("a=1,b=1"),
        Mix.parse("x=1,y=2"),
        SharedPrefix(0.5, 3, 20),
    )
    arrivals = Arrivals.parse("gamma:cv=2", 50)
    one = build_plan(arrivals, workload, seed=7, num_requests=300)
    two = build_plan(arrivals, workload, seed=7, num_requests=300)
    other = build_plan(arrivals, workload, seed=8, num_requests=300)
    assert one.requests == two.requests
    assert [r.offset_ns for r in one.requests] != [r.offset_ns for r in other.requests]
    prompts_one, prompts_two = Prompts(7), Prompts(7)
    r = one.requests[5]
    args = (r.seed, r.prompt_tokens - r.prefix_tokens, r.prefix_id, r.prefix_tokens)
    assert prompts_one.prompt(*args) == prompts_two.prompt(*args)


def test_workload_change_keeps_arrival_times():
    arrivals = Arrivals.parse("poisson", 10)
    a = build_plan(arrivals, Workload(), seed=1, num_requests=50)
    b = build_plan(arrivals, Workload(prompt_tokens=Distribution.parse("999")), seed=1, num_requests=50)
    assert [r.offset_ns for r in a.requests] == [r.offset_ns for r in b.requests]


def test_distributions_sample_in_range():
    rng = random.Random(0)
    assert {Distribution.parse("37").sample(rng) for _ in range(10)} == {37}
    uniform = [Distribution.parse("uniform:5,8").sample(rng) for _ in range(2000)]
    assert set(uniform) == {5, 6, 7, 8}
    lognormal = Distribution.parse("lognormal:median=100,sigma=0.5,max=300")
    xs = [lognormal.sample(rng) for _ in range(20_000)]
    assert statistics.median(xs) == pytest.approx(100, rel=0.05)
    assert max(xs) == 300 and min(xs) >= 1


@pytest.mark.parametrize("spec", ["", "uniform:9,3", "uniform:3", "lognormal:median=5", "zipf:2", "0", "x"])
def test_bad_distributions_are_refused(spec):
    with pytest.raises(LoadgenError):
        Distribution.parse(spec)


def test_mix_follows_weights():
    mix = Mix.parse("interactive=3,batch=1")
    rng = random.Random(0)
    draws = [mix.sample(rng) for _ in range(20_000)]
    assert draws.count("interactive") / len(draws) == pytest.approx(0.75, abs=0.02)
    assert Mix.parse(None).sample(rng) is None
    assert Mix.parse("solo").sample(rng) == "solo"
    with pytest.raises(LoadgenError):
        Mix.parse("a=x")


def test_shared_prefix_fraction_count_and_text():
    workload = Workload(Distribution.parse("10"), Distribution.parse("5"), shared_prefix=SharedPrefix(0.3, 4, 50))
    plan = build_plan(Arrivals.parse("constant", 100), workload, seed=2, num_requests=5000)
    shared = [r for r in plan.requests if r.prefix_id >= 0]
    assert len(shared) / len(plan) == pytest.approx(0.3, abs=0.03)
    assert {r.prefix_id for r in shared} == {0, 1, 2, 3}
    assert all(r.prompt_tokens == 60 and r.prefix_tokens == 50 for r in shared)
    prompts = Prompts(2)
    texts = [prompts.prompt(r.seed, 10, r.prefix_id, 50) for r in shared if r.prefix_id == 1][:2]
    head = " ".join(texts[0].split()[:50])
    assert texts[1].startswith(head) and texts[0] != texts[1]
    assert len(texts[0].split()) == 60


def test_token_id_prompts_are_exact():
    ids = Prompts(0, token_ids=True).prompt(11, 30, prefix_id=0, prefix_tokens=20)
    assert len(ids) == 50 and all(32 <= t < 127 for t in ids)


def test_shared_prefix_spec():
    assert SharedPrefix.parse("fraction=0.5,count=4,tokens=256") == SharedPrefix(0.5, 4, 256)
    assert SharedPrefix.parse(None) is None
    for bad in ("count=4", "fraction=2", "fraction=0.5,size=3"):
        with pytest.raises(LoadgenError):
            SharedPrefix.parse(bad)


def test_replay_orders_by_time_and_keeps_fields(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_text(
        '{"timestamp": 1700000000.5, "prompt_tokens": 20, "output_tokens": 7, "tier": "batch", "tenant": "t1"}\n'
        "# a comment\n\n"
        '{"timestamp": 1700000000.0, "input_tokens": 10, "max_tokens": 3, "tier": "interactive"}\n'
        '{"timestamp": "2023-11-14T22:13:21.000Z", "prompt": "hello there", "output_tokens": 2}\n'
    )
    plan = read_replay(path, time_scale=2.0)
    assert [r.offset_ns for r in plan.requests] == [0, 250_000_000, 500_000_000]
    first, second, third = plan.requests
    assert (first.prompt_tokens, first.output_tokens, first.tier) == (10, 3, "interactive")
    assert (second.prompt_tokens, second.output_tokens, second.tier, second.tenant) == (20, 7, "batch", "t1")
    assert third.prompt == "hello there" and third.prompt_tokens == 2
    assert [r.index for r in plan.requests] == [0, 1, 2]


def test_replay_offsets_and_defaults(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"offset_ms": 10}\n{"offset_s": 0.5}\n')
    plan = read_replay(path, Workload(Distribution.parse("33"), Distribution.parse("4")))
    assert [r.offset_ns for r in plan.requests] == [0, 490_000_000]
    assert all(r.prompt_tokens == 33 and r.output_tokens == 4 for r in plan.requests)


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"timestamp": 1, "prompt_tokens": 5', "not valid JSON"),
        ('{"prompt_tokens": 5}', "no time"),
        ('{"offset_s": 1, "prompt_tokens": "five"}', "prompt_tokens must be an integer"),
        ('{"offset_s": 1, "output_tokens": 0}', "output_tokens must be >= 1"),
        ("[1, 2]", "JSON object"),
        ('{"timestamp": "yesterday"}', "ISO-8601"),
    ],
)
def test_malformed_replay_names_file_and_line(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"offset_s": 0}\n' + line + "\n")
    with pytest.raises(LoadgenError) as err:
        read_replay(path)
    text = str(err.value)
    assert text.startswith(f"{path}:2: ") and message in text and "\n" not in text


def test_missing_replay_file(tmp_path):
    with pytest.raises(LoadgenError, match="cannot read replay file"):
        read_replay(tmp_path / "nope.jsonl")


def test_choice_distribution_draws_its_lengths_by_weight():
    import random

    d = Distribution.parse("choice:32=0.9,1800=0.1")
    assert str(d) == "choice:32=0.9,1800=0.1"
    draws = [d.sample(random.Random(i)) for i in range(2000)]
    assert set(draws) == {32, 1800}
    assert 0.05 < draws.count(1800) / len(draws) < 0.15
    import pytest

    from budgetscope.loadgen import LoadgenError

    with pytest.raises(LoadgenError, match="choice needs LEN=W pairs"):
        Distribution.parse("choice:0=1")

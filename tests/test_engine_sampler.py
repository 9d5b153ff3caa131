"""The sampler: a greedy-only batch is one argmax (nothing else runs); drawing rows softmax and draw as before."""

from __future__ import annotations

import pytest
import torch

from budgetscope.engine.sampler import Sampler
from budgetscope.engine.sampling_params import SamplingParams
from budgetscope.engine.sequence import Sequence

FORBIDDEN = ("softmax", "multinomial", "sort", "cumsum")  # what drawing a token costs; greedy needs none of it


@pytest.fixture
def drawing_forbidden(monkeypatch):
    """torch's drawing ops raise when called (the names of the calls made, for the tests that expect them)."""
    calls = []

    def refuse(name):
        def call(*a, **k):
            calls.append(name)
            raise AssertionError(f"torch {name} ran")

        return call

    for name in FORBIDDEN:
        monkeypatch.setattr(torch, name, refuse(name))
        monkeypatch.setattr(torch.Tensor, name, refuse(name))
    return calls


def _seqs(*params: SamplingParams) -> list[Sequence]:
    return [Sequence([1, 2, 3], p) for p in params]


def test_greedy_batch_is_argmax_alone(drawing_forbidden):
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    seqs = _seqs(SamplingParams(temperature=0), SamplingParams(temperature=0.7, top_k=1), SamplingParams(temperature=0))
    assert Sampler()(logits, seqs) == logits.argmax(-1).tolist()
    assert drawing_forbidden == []


def test_greedy_batch_with_its_argmax_given_computes_nothing(drawing_forbidden, monkeypatch):
    """The graphs compute the argmax on the device; the sampler then returns it as it is."""
    greedy = torch.tensor([4, 9])
    monkeypatch.setattr(torch.Tensor, "argmax", lambda *a, **k: pytest.fail("argmax ran again"))
    assert Sampler().sample(torch.zeros(2, 50), _seqs(*[SamplingParams(temperature=0)] * 2), greedy=greedy) is greedy


def test_a_drawing_row_runs_the_draw(drawing_forbidden):
    """The guard above can fail: a batch with one temperature row reaches softmax."""
    with pytest.raises(AssertionError, match="softmax"):
        Sampler()(torch.randn(2, 50), _seqs(SamplingParams(temperature=0), SamplingParams(temperature=0.8)))
    assert drawing_forbidden == ["softmax"]

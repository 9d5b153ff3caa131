"""Synthetic prompts, made locally and reproducibly: no dataset is downloaded.

Text prompts are common English words: one word is about one token for the BPE tokenizers of most models
(a byte-level tokenizer sees about five tokens a word). Token-id prompts (`/v1/completions` only) are exact:
ids drawn from a range that every vocabulary holds (printable ASCII by default).
"""

from __future__ import annotations

import random

_WORDS = tuple(dict.fromkeys((
    "the of and to in is was for on that with as by at from his it an were are which this be has had "
    "not or have one their but first also after new two its time they who been her other when all would "
    "there year into more some over only years most can used between than made three many world where "
    "about state such through city part during later people school being both under while then however "
    "well known called these them film team four each him national back since united name very early "
    "number even long day high still life game work war last well five great second before left became "
    "same best much place including because another against season around three book water music small "
    "public along family final point house power field light common north south east west river road "
    "story model order money market system program report light cloud engine token budget queue batch"
).split()))


class Prompts:
    """Makes prompt text (or token ids) for planned requests; shared prefixes are made once and reused."""

    def __init__(self, seed: int, token_ids: bool = False, id_range: tuple[int, int] = (32, 127)) -> None:
        self.seed = seed
        self.token_ids = token_ids
        self.id_range = id_range
        self._prefixes: dict[int, str | list[int]] = {}

    def prompt(self, unique_seed: int, unique_tokens: int, prefix_id: int = -1, prefix_tokens: int = 0):
        """The prompt: shared prefix `prefix_id` (if >= 0) then `unique_tokens` tokens of its own."""
        rng = random.Random(unique_seed)
        own = self._make(rng, unique_tokens)
        if prefix_id < 0:
            return own
        prefix = self._prefixes.get(prefix_id)
        if prefix is None:
            prefix = self._prefixes[prefix_id] = self._make(random.Random(f"{self.seed}/prefix/{prefix_id}"), prefix_tokens)
        return prefix + own if self.token_ids else prefix + " " + own

    def _make(self, rng: random.Random, n: int):
        if self.token_ids:
            lo, hi = self.id_range
            return [rng.randrange(lo, hi) for _ in range(n)]
        return " ".join(rng.choices(_WORDS, k=n))

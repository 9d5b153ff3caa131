"""Synthetic prompts, made locally and reproducibly: no dataset is downloaded.

Text prompts are common English words. With the target's tokenizer (`--tokenizer`, `TargetTokenizer`) they
have exactly the planned number of tokens; without one, one word stands for one token, which holds roughly for
the BPE tokenizers of most models (a byte-level tokenizer sees about five tokens a word), and the run summary
says the lengths are approximate. Token-id prompts (`/v1/completions` only) are exact: ids drawn from a range
that every vocabulary holds (printable ASCII by default).
"""

from __future__ import annotations

import random

_WORDS = tuple(
    dict.fromkeys(
        (
            "the of and to in is was for on that with as by at from his it an were are which this be has had "
            "not or have one their but first also after new two its time they who been her other when all would "
            "there year into more some over only years most can used between than made three many world where "
            "about state such through city part during later people school being both under while then however "
            "well known called these them film team four each him national back since united name very early "
            "number even long day high still life game work war last well five great second before left became "
            "same best much place including because another against season around three book water music small "
            "public along family final point house power field light common north south east west river road "
            "story model order money market system program report light cloud engine token budget queue batch"
        ).split()
    )
)


class Prompts:
    """Makes prompt text (or token ids) for planned requests; shared prefixes are made once and reused."""

    def __init__(
        self, seed: int, token_ids: bool = False, id_range: tuple[int, int] = (32, 127), tokenizer=None
    ) -> None:
        self.seed = seed
        self.token_ids = token_ids
        self.id_range = id_range
        self.tokenizer = tokenizer
        """A `TargetTokenizer`: text prompts then have exactly the planned number of tokens."""
        self._prefixes: dict[int, str | list[int]] = {}

    @property
    def exact(self) -> bool:
        """Whether prompt lengths are exact in the target's tokens (token ids, or text cut by its tokenizer)."""
        return self.token_ids or self.tokenizer is not None

    @property
    def length_basis(self) -> str:
        """What a planned prompt length counts, in a few words (for the run summary)."""
        if self.token_ids:
            return "token ids, exact"
        if self.tokenizer is not None:
            return f"exact, counted by {self.tokenizer.path} (without special tokens)"
        return "approximate: one word taken as one token (give --tokenizer for exact lengths)"

    def prompt(self, unique_seed: int, unique_tokens: int, prefix_id: int = -1, prefix_tokens: int = 0):
        """The prompt: shared prefix `prefix_id` (if >= 0) then `unique_tokens` tokens of its own."""
        rng = random.Random(unique_seed)
        if prefix_id < 0:
            return self._make(rng, unique_tokens)
        prefix = self._prefixes.get(prefix_id)
        if prefix is None:
            prefix = self._prefixes[prefix_id] = self._make(
                random.Random(f"{self.seed}/prefix/{prefix_id}"), prefix_tokens
            )
        if self.token_ids:
            return prefix + self._make(rng, unique_tokens)
        if self.tokenizer is not None:  # the whole prompt counts right, not each part alone
            return prefix + " " + self.tokenizer.fit(list(_WORDS), unique_tokens, rng, head=prefix)
        return prefix + " " + self._make(rng, unique_tokens)

    def _make(self, rng: random.Random, n: int):
        if self.token_ids:
            lo, hi = self.id_range
            return [rng.randrange(lo, hi) for _ in range(n)]
        if self.tokenizer is not None:
            return self.tokenizer.fit(list(_WORDS), n, rng)
        return " ".join(rng.choices(_WORDS, k=n))

"""The target's tokenizer (`budgetscope load --tokenizer PATH`): prompts of exactly N tokens, and real lengths.

PATH is a Hugging Face `tokenizer.json`, or a folder holding one (a model checkout). Counting is the tokenizer's
encoding of the prompt text alone, without special tokens: the server adds its own (a BOS token, a chat
template), and the run summary shows what it counted (`usage.prompt_tokens`). Needs the `tokenizers` library
(the `loadgen` extra).
"""

from __future__ import annotations

import random
from pathlib import Path

from budgetscope.extras import require
from budgetscope.loadgen.errors import LoadgenError

_MAX_FIT_ROUNDS = 64


class TargetTokenizer:
    """Counts and cuts text in the target model's tokens."""

    def __init__(self, path: str | Path) -> None:

        require("loadgen", "--tokenizer", modules=("tokenizers",))
        # imported on use: tokenizers 85 ms to import
        from tokenizers import Tokenizer

        p = Path(path)
        file = p / "tokenizer.json" if p.is_dir() else p
        if not file.is_file():
            raise LoadgenError(
                f"--tokenizer: {path}: no tokenizer.json there" if p.is_dir() else f"--tokenizer: {path}: no such file"
            )
        try:
            self._tok = Tokenizer.from_file(str(file))
        except Exception as e:  # the library raises its own Exception type for any malformed file
            raise LoadgenError(f"--tokenizer: {file}: not a Hugging Face tokenizer.json ({e})") from None
        self.path = str(file)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, without special tokens."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def count(self, text: str) -> int:
        """Number of tokens of `text`, without special tokens."""
        return len(self.encode(text))

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=True)

    def fit(self, words: list[str], n: int, rng: random.Random, head: str = "") -> str:
        """Text drawn from `words` such that `head + text` has exactly count(head) + n tokens (head is a shared
        prefix, or empty). Cuts in token space, then re-encodes until the decoded text counts right (a cut can
        split a merge, or a multi-byte character)."""
        base = self.count(head) if head else 0
        want = base + n
        sep = " " if head else ""
        text = " ".join(rng.choices(words, k=max(n, 1)))
        while self.count(head + sep + text) < want:
            text += " " + " ".join(rng.choices(words, k=max(n, 1)))
        ids = self.encode(text)
        for _ in range(_MAX_FIT_ROUNDS):
            candidate = self.decode(ids).strip()
            got = self.count(head + sep + candidate)
            if got == want and candidate:
                return candidate
            if got > want:
                ids = ids[: max(len(ids) - (got - want), 0)]
            else:
                ids = ids + self.encode(" " + rng.choice(words))[: want - got]
        raise LoadgenError(f"--tokenizer: cannot make a prompt of exactly {n} tokens with {self.path}")

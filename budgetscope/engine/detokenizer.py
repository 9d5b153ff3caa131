"""Streaming detokenization: emit text as tokens arrive, never half a UTF-8 character."""

from __future__ import annotations


class Detokenizer:
    """Decodes a short window (from prefix_offset) twice per token and emits the difference.

    Decoding a window rather than one token keeps tokenizers that merge across tokens (byte-level BPE,
    sentencepiece spaces) right; a trailing U+FFFD means an incomplete character, so the text waits.

    A token that adds nothing to the window's text (no new text) leaves the window where it was, so a run of them
    would make every later decode longer. Where the tokenizer names ids that decode to no text whatever surrounds
    them (`silent_from`: the byte tokenizer's ids past 255), those are left out of the window: every decode sees
    the same bytes, so every delta is the same, and a `1b` model's random ids (most past 255) cost no more than
    any other.
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.silent_from: int | None = getattr(tokenizer, "silent_from", None)
        self.token_ids: list[int] = []
        self.prefix_offset = 0
        self.read_offset = 0
        self.text = ""

    def add(self, token_ids: list[int]) -> str:
        """Append token ids; return the new text they complete (may be empty)."""
        if self.silent_from is not None:
            token_ids = [t for t in token_ids if t < self.silent_from]
            if not token_ids:  # no new bytes: the window's text is unchanged, nothing is emitted
                return ""
        self.token_ids.extend(token_ids)
        prefix = self.tokenizer.decode(self.token_ids[self.prefix_offset : self.read_offset])
        full = self.tokenizer.decode(self.token_ids[self.prefix_offset :])
        if len(full) > len(prefix) and not full.endswith("\ufffd"):
            delta = full[len(prefix) :]
            self.prefix_offset, self.read_offset = self.read_offset, len(self.token_ids)
            self.text += delta
            return delta
        return ""

    def flush(self) -> str:
        """Whatever text is still held back (an incomplete character shows as U+FFFD)."""
        prefix = self.tokenizer.decode(self.token_ids[self.prefix_offset : self.read_offset])
        full = self.tokenizer.decode(self.token_ids[self.prefix_offset :])
        delta = full[len(prefix) :]
        self.prefix_offset = self.read_offset = len(self.token_ids)
        self.text += delta
        return delta

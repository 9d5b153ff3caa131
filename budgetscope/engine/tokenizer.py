"""Text to token ids and back: a byte-level tokenizer by default, a Hugging Face `tokenizer.json` when given."""

from __future__ import annotations

import json
from pathlib import Path


class ByteTokenizer:
    """UTF-8 bytes are ids 0-255; 256 is BOS, 257 EOS. Ids past 257 (a wider model vocab) decode to nothing."""

    bos_token_id = 256
    eos_token_id = 257
    vocab_size = 258
    silent_from = 256
    """Ids from here on decode to no text in any context (Detokenizer leaves them out of its window)."""

    @property
    def eos_token_ids(self) -> set[int]:
        return {self.eos_token_id}

    def encode(self, text: str) -> list[int]:
        return [self.bos_token_id, *text.encode("utf-8")]

    def decode(self, ids: list[int]) -> str:
        return bytes([i for i in ids if i < 256]).decode("utf-8", errors="replace")

    def apply_chat_template(self, messages: list[dict]) -> str:
        return render_chat(messages)


class HFTokenizer:
    """A `tokenizers` tokenizer read from `tokenizer.json`; EOS from the model config or tokenizer_config."""

    def __init__(self, path: str | Path, eos_token_ids: list[int] | None = None):
        # imported on use: tokenizers 85 ms to import
        from tokenizers import Tokenizer

        path = Path(path)
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self.vocab_size = self.tokenizer.get_vocab_size()
        extra = _read_json(path / "tokenizer_config.json")
        ids = set(eos_token_ids or [])
        eos_token = extra.get("eos_token")
        if isinstance(eos_token, dict):
            eos_token = eos_token.get("content")
        if eos_token and self.tokenizer.token_to_id(eos_token) is not None:
            ids.add(self.tokenizer.token_to_id(eos_token))
        self._eos = ids
        self.chat_template = extra.get("chat_template") if isinstance(extra.get("chat_template"), str) else None

    @property
    def eos_token_ids(self) -> set[int]:
        return self._eos

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def apply_chat_template(self, messages: list[dict]) -> str:
        """The checkpoint's Jinja chat template when it has one (and jinja2 is installed), else the generic one."""
        if self.chat_template:
            try:
                # imported on use: jinja2 101 ms to import
                import jinja2
            except ImportError:
                return render_chat(messages)
            template = jinja2.Environment().from_string(self.chat_template)
            return template.render(messages=messages, add_generation_prompt=True, bos_token="", eos_token="")
        return render_chat(messages)


def render_chat(messages: list[dict]) -> str:
    """The generic chat layout: `<|role|>\\ncontent\\n` per message, then `<|assistant|>\\n`."""
    parts = [f"<|{m.get('role', 'user')}|>\n{m.get('content') or ''}\n" for m in messages]
    return "".join(parts) + "<|assistant|>\n"


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def load_tokenizer(checkpoint: str | Path | None, eos_token_ids: list[int] | None = None):
    """HFTokenizer when checkpoint has a tokenizer.json, else ByteTokenizer."""
    if checkpoint and (Path(checkpoint) / "tokenizer.json").exists():
        return HFTokenizer(checkpoint, eos_token_ids)
    return ByteTokenizer()

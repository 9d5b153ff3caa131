"""Model shapes: the named configs and the reading of a Hugging Face `config.json`."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path


@dataclass(slots=True)
class ModelConfig:
    """The shape of a Llama-style decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU)."""

    name: str = "tiny"
    vocab_size: int = 512
    hidden_size: int = 256
    intermediate_size: int = 768
    num_hidden_layers: int = 4
    num_attention_heads: int = 8
    num_key_value_heads: int = 2
    head_dim: int = 0  # 0: hidden_size // num_attention_heads
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None  # only {"rope_type": "llama3", ...} is understood
    tie_word_embeddings: bool = False
    bos_token_id: int | None = None
    eos_token_id: list[int] = field(default_factory=list)

    def __post_init__(self):
        if self.head_dim == 0:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        if self.rope_scaling and self.rope_scaling.get("rope_type", self.rope_scaling.get("type")) not in (
            "llama3",
            "default",
        ):
            raise ValueError(f"unsupported rope_scaling {self.rope_scaling!r}: only llama3 is implemented")

    @property
    def num_parameters(self) -> int:
        """Parameter count implied by the shape (embeddings included once when tied)."""
        h, d = self.hidden_size, self.head_dim
        attn = h * d * (2 * self.num_attention_heads + 2 * self.num_key_value_heads)
        mlp = 3 * h * self.intermediate_size
        per_layer = attn + mlp + 2 * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return self.vocab_size * h + self.num_hidden_layers * per_layer + h + head

    def to_hf_dict(self) -> dict:
        """This shape as a Hugging Face Llama `config.json` dictionary."""
        out = {k: v for k, v in asdict(self).items() if k not in ("name", "eos_token_id", "bos_token_id")}
        out.update(model_type="llama", architectures=["LlamaForCausalLM"], hidden_act="silu")
        if self.eos_token_id:
            out["eos_token_id"] = self.eos_token_id[0] if len(self.eos_token_id) == 1 else self.eos_token_id
        if self.bos_token_id is not None:
            out["bos_token_id"] = self.bos_token_id
        return out

    @classmethod
    def from_hf_dir(cls, path: str | Path) -> ModelConfig:
        """Read `<path>/config.json` of a Hugging Face Llama-family checkpoint."""
        raw = json.loads((Path(path) / "config.json").read_text())
        if raw.get("hidden_act", "silu") != "silu":
            raise ValueError(f"unsupported hidden_act {raw['hidden_act']!r}")
        eos = raw.get("eos_token_id")
        eos_ids = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
        heads = raw["num_attention_heads"]
        return cls(
            name=Path(path).name,
            vocab_size=raw["vocab_size"],
            hidden_size=raw["hidden_size"],
            intermediate_size=raw["intermediate_size"],
            num_hidden_layers=raw["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=raw.get("num_key_value_heads") or heads,
            head_dim=raw.get("head_dim") or raw["hidden_size"] // heads,
            max_position_embeddings=raw.get("max_position_embeddings", 2048),
            rms_norm_eps=raw.get("rms_norm_eps", 1e-5),
            rope_theta=raw.get("rope_theta", 10000.0),
            rope_scaling=raw.get("rope_scaling"),
            tie_word_embeddings=raw.get("tie_word_embeddings", False),
            bos_token_id=raw.get("bos_token_id"),
            eos_token_id=eos_ids,
        )


# Random-weight configs. `tiny` is sized for 2 CPU cores: one step at batch 1 costs about as much in
# fixed overhead (Python, kernel dispatch, scheduling) as in arithmetic, as a small model on a GPU does.
CONFIGS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(name="tiny"),
    "small": ModelConfig(
        name="small",
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
    ),
    "medium": ModelConfig(
        name="medium",
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=8,
        tie_word_embeddings=True,
    ),
    "1b": ModelConfig(
        name="1b",
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        rope_theta=500000.0,
        tie_word_embeddings=True,
        max_position_embeddings=4096,
    ),
}


def named_config(name: str) -> ModelConfig:
    """A copy of the named random-weight config; ValueError names the known ones."""
    if name not in CONFIGS:
        raise ValueError(f"unknown model config {name!r}; known: {', '.join(CONFIGS)}")
    return replace(CONFIGS[name])

"""Hugging Face-format checkpoints: read into the model, and write (tests and sample checkpoints)."""

from __future__ import annotations

import json
from pathlib import Path

from budgetscope.engine.model import LlamaForCausalLM

_IGNORED = ("rotary_emb.inv_freq",)


def load_checkpoint(model: LlamaForCausalLM, path: str | Path) -> None:
    """Copy every `*.safetensors` tensor of `path` into model; ValueError on a missing or unknown weight."""
    # imported on use: torch 5376 ms to import
    from safetensors.torch import load_file

    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise ValueError(f"no *.safetensors file in {path}")
    state = {}
    for file in files:
        state.update(load_file(str(file)))
    state = {k: v for k, v in state.items() if not k.endswith(_IGNORED)}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if model.config.tie_word_embeddings:
        missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise ValueError(
            f"checkpoint {path} does not fit the model: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    if model.config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight


def save_checkpoint(model: LlamaForCausalLM, path: str | Path) -> None:
    """Write `config.json` and `model.safetensors` the way Hugging Face lays out a Llama checkpoint."""
    # imported on use: torch 5376 ms to import
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(model.config.to_hf_dict(), indent=2))
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    save_file(state, str(path / "model.safetensors"))

"""Every knob of the engine in one validated dataclass."""

from __future__ import annotations

from dataclasses import dataclass, field

ATTENTION_BACKENDS = ("auto", "triton", "sdpa")

DEFAULT_TIER_PRIORITIES = {"interactive": 0, "default": 1, "batch": 2}
"""Lower runs first. Tiers not listed take the priority of `default`."""


@dataclass(slots=True)
class EngineConfig:
    """What to load and how to schedule it. Times are seconds, sizes are tokens or blocks."""

    model: str = "tiny"  # a named config (model_config.CONFIGS); ignored when checkpoint is set
    checkpoint: str | None = None  # a Hugging Face-format folder: config.json + *.safetensors (+ tokenizer.json)
    served_model_name: str | None = None  # the `model` name the API answers to; defaults to model/checkpoint name
    seed: int = 0  # random weights and default sampling seed
    device: str = "auto"  # auto: cuda when available, else cpu
    dtype: str = "auto"  # auto: bfloat16 on cuda, float32 on cpu
    max_model_len: int = 2048  # prompt + output tokens of one request
    block_size: int = 16  # tokens per KV block
    num_kv_blocks: int = 0  # 0: enough for max_num_seqs sequences of max_model_len / 4 tokens
    max_num_batched_tokens: int = 512  # token budget of one step (prefill tokens + one per decoding sequence)
    max_num_seqs: int = 32  # running sequences at once
    enable_chunked_prefill: bool = True  # split long prompts across steps under the token budget
    enable_prefix_caching: bool = True  # reuse full KV blocks by chained hash
    max_waiting: int = 256  # bounded waiting queue; beyond it new requests get HTTP 429
    max_prompt_tokens: int = 0  # 0: max_model_len - 1
    max_output_tokens: int = 0  # 0: max_model_len - 1
    default_max_tokens: int = 16  # /v1/completions default, as in the OpenAI API
    default_chat_max_tokens: int = 256
    request_timeout_s: float = 0.0  # per-request deadline from receive; 0: none unless the request sets one
    deadline_admission: bool = True  # 429 at once for a request the measured service rate cannot start in time
    tier_priorities: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_TIER_PRIORITIES))
    num_threads: int = 0  # torch intra-op threads on cpu; 0: leave torch's default
    enforce_eager: bool = False  # True: no CUDA graphs for decode steps (on cpu there are none anyway)
    compile: bool = False  # torch.compile the decode graphs' forward (fewer kernels; slower start)
    attention_backend: str = "auto"  # "triton" (paged kernel), "sdpa" (PyTorch gather); auto: triton on CUDA
    # schedule and launch step N+1 before step N's sampled tokens are read back (docs/engine.md, "Async
    # scheduling"); None: on in the engine process of `engine serve` on CUDA, off elsewhere
    async_scheduling: bool | None = None

    def __post_init__(self):
        if self.block_size <= 0 or self.max_model_len <= 1:
            raise ValueError("block_size must be > 0 and max_model_len > 1")
        if self.max_num_seqs <= 0 or self.max_num_batched_tokens <= 0:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be > 0")
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            # Without chunking a whole prompt must fit one step's budget.
            self.max_num_batched_tokens = self.max_model_len
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError("max_num_batched_tokens must be >= max_num_seqs (one token a decoding sequence)")
        if self.num_kv_blocks == 0:
            tokens = self.max_num_seqs * max(self.max_model_len // 4, self.block_size)
            self.num_kv_blocks = -(-tokens // self.block_size)
        if self.max_prompt_tokens == 0:
            self.max_prompt_tokens = self.max_model_len - 1
        if self.max_output_tokens == 0:
            self.max_output_tokens = self.max_model_len - 1
        if self.attention_backend not in ATTENTION_BACKENDS:
            raise ValueError(
                f"attention_backend must be one of {', '.join(ATTENTION_BACKENDS)}, not {self.attention_backend!r}"
            )
        if self.max_waiting < 0:
            raise ValueError("max_waiting must be >= 0")
        if "default" not in self.tier_priorities:
            self.tier_priorities["default"] = DEFAULT_TIER_PRIORITIES["default"]

    def priority_of(self, tier: str) -> int:
        """Scheduling priority of a tier (lower runs first)."""
        return self.tier_priorities.get(tier, self.tier_priorities["default"])

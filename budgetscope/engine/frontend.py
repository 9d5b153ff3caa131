"""What the API side needs of an engine without its model: names, limits, the tokenizer, request validation, and
the end of a request's trace. Torch-free, so that the API server process of `engine serve` never loads torch.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from budgetscope.engine.engine_config import EngineConfig
from budgetscope.engine.engine_metrics import EngineMetrics
from budgetscope.engine.errors import RequestError
from budgetscope.engine.model_config import ModelConfig, named_config
from budgetscope.engine.sampling_params import SamplingParams
from budgetscope.engine.sequence import Sequence
from budgetscope.engine.telemetry import NULL_TRACE, Telemetry
from budgetscope.engine.tokenizer import load_tokenizer
from budgetscope.instrument import attributes as A


class Frontend:
    """The engine's request-facing half: `make_sequence` validates a prompt against the limits, `finish_trace`
    ends a request's trace and counts it. The same in the engine (LLMEngine holds one) and in the API process."""

    def __init__(self, config: EngineConfig, telemetry: Telemetry | None = None, metrics: EngineMetrics | None = None):
        self.config = config
        self.telemetry = telemetry or Telemetry(None)
        self.metrics = metrics or EngineMetrics()
        self.model_config = (
            ModelConfig.from_hf_dir(config.checkpoint) if config.checkpoint else named_config(config.model)
        )
        self.model_name = config.served_model_name or (
            config.checkpoint.rstrip("/").split("/")[-1] if config.checkpoint else config.model
        )
        self.tokenizer = load_tokenizer(config.checkpoint, self.model_config.eos_token_id)
        self.eos_token_ids = set(self.tokenizer.eos_token_ids) | set(self.model_config.eos_token_id)
        self.max_model_len = min(config.max_model_len, self.model_config.max_position_embeddings)

    def make_sequence(
        self,
        prompt_token_ids: list[int],
        params: SamplingParams,
        *,
        request_id: str | None = None,
        tier: str = "default",
        tenant: str | None = None,
        arrival_ns: int | None = None,
        timeout_s: float | None = None,
        trace=NULL_TRACE,
        on_output: Callable | None = None,
    ) -> Sequence:
        """A validated Sequence; RequestError(400) when the prompt or max_tokens breaks a limit."""
        self.validate(prompt_token_ids, params)
        arrival_ns = arrival_ns or time.time_ns()
        timeout_s = timeout_s or self.config.request_timeout_s
        return Sequence(
            prompt_token_ids,
            params,
            request_id=request_id,
            tier=tier,
            tenant=tenant,
            priority=self.config.priority_of(tier),
            arrival_ns=arrival_ns,
            deadline_ns=arrival_ns + int(timeout_s * 1e9) if timeout_s else None,
            trace=trace,
            on_output=on_output,
        )

    def validate(self, prompt_token_ids: list[int], params: SamplingParams) -> None:
        cfg, num = self.config, len(prompt_token_ids)
        if num == 0:
            raise RequestError(400, "the prompt is empty")
        if num > cfg.max_prompt_tokens:
            raise RequestError(400, f"prompt has {num} tokens; the limit is {cfg.max_prompt_tokens}")
        if params.max_tokens > cfg.max_output_tokens:
            raise RequestError(400, f"max_tokens {params.max_tokens} exceeds the limit {cfg.max_output_tokens}")
        if num + params.max_tokens > self.max_model_len:
            raise RequestError(
                400,
                f"prompt ({num} tokens) + max_tokens ({params.max_tokens}) exceeds "
                f"the model's context of {self.max_model_len} tokens",
            )
        if -(-(num + params.max_tokens) // cfg.block_size) > cfg.num_kv_blocks:
            raise RequestError(
                400,
                f"prompt ({num} tokens) + max_tokens ({params.max_tokens}) cannot fit "
                f"the KV cache of {cfg.num_kv_blocks * cfg.block_size} tokens",
            )
        if any(t < 0 or t >= self.model_config.vocab_size for t in prompt_token_ids):
            raise RequestError(400, "prompt token id out of the vocabulary")

    def finish_trace(self, seq: Sequence, outcome: str | None = None) -> None:
        """End seq's request trace and count it in the metrics (once the response is complete)."""
        outcome = outcome or seq.outcome or "ok"
        self._response_attributes(seq)
        seq.trace.finish(
            outcome=outcome,
            input_tokens=seq.num_prompt_tokens,
            output_tokens=seq.num_output_tokens,
            cached_tokens=seq.num_cached_tokens,
        )
        self.metrics.observe_finish(
            outcome, seq.arrival_ns, time.time_ns(), seq.num_prompt_tokens, seq.num_cached_tokens
        )

    def _response_attributes(self, seq: Sequence) -> None:
        """The GenAI request/response attributes only the engine knows: max tokens, finish reason, model."""
        seq.trace.set(A.GEN_AI_REQUEST_MAX_TOKENS, seq.params.max_tokens)
        seq.trace.set(A.GEN_AI_RESPONSE_MODEL, self.model_name)
        if seq.finish_reason is not None:
            seq.trace.set(A.GEN_AI_RESPONSE_FINISH_REASONS, [seq.finish_reason])

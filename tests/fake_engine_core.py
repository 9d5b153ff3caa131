"""A fake engine for the engine process of `engine serve`: real scheduling, no model — each step "runs" on a fake
device for a set time, as a GPU step would, and samples token ids from a fixed list. A test double (tests/ holds
every fake) that `benchmarks/bench_serve_path.py` runs: never on the serving path.

The engine process (`core_process.EngineCore`), its loop, the messages and the whole API process are the real ones;
only `LLMEngine`'s model, KV cache and ModelRunner are replaced. `FakeTimedEngine` keeps LLMEngine's own
`launch_step` / `finish_step` (scheduler, block manager, async scheduling, step records), and its runner queues each
step on a fake device that is busy for `step_us + per_seq_us × sequences` after the previous step ends: `launch`
returns at once, `wait` sleeps until the step is done. So the engine process overlaps its host work with the step
exactly as it does with CUDA, and a step rate like an H200's (2.3 ms for 64 sequences of the `1b` model) can be
served on a CPU.

    CoreClient(front, make_engine=functools.partial(make_fake_engine, step_us=2300)).start()
"""

from __future__ import annotations

import functools
import random
import time

from budgetscope.engine.block_manager import BlockManager
from budgetscope.engine.engine_config import EngineConfig
from budgetscope.engine.engine_metrics import EngineMetrics
from budgetscope.engine.frontend import Frontend
from budgetscope.engine.scheduler import ScheduledBatch, Scheduler
from budgetscope.engine.telemetry import Telemetry

TOKEN_KINDS = ("vocab", "ascii")
"""Which ids the fake samples: `vocab`, uniform over the model's vocabulary but EOS (a random-weight model; with
the byte tokenizer of a named config most ids past 255 decode to no text, as on the GPU runs); `ascii`, printable
ASCII bytes (one character of text a token)."""


class FakeDevice:
    """What `LLMEngine.device` says about the fake's device."""

    type = "fake"

    def __str__(self) -> str:
        return "fake (timed steps, no model)"


class FakePendingTokens:
    """A step's sampled ids, ready at `ready_ns` (perf_counter_ns): `wait()` sleeps until then."""

    __slots__ = ("ids", "ready_ns")

    def __init__(self, ids: list[int], ready_ns: int):
        self.ids = ids
        self.ready_ns = ready_ns

    def wait(self) -> list[int]:
        delay_ns = self.ready_ns - time.perf_counter_ns()
        if delay_ns > 0:
            time.sleep(delay_ns / 1e9)
        return self.ids


class FakeTimedRunner:
    """Queues steps on the fake device one after another; each is busy `step_us + per_seq_us × sequences`."""

    def __init__(self, step_us: float, per_seq_us: float, token_ids: list[int], seed: int = 0):
        self.step_ns = int(step_us * 1000)
        self.per_seq_ns = int(per_seq_us * 1000)
        self.token_ids = token_ids
        self.rng = random.Random(seed)
        self.busy_until_ns = 0
        self.keep_sampled = False  # set by LLMEngine's async scheduling; nothing to keep on a fake device
        self.num_steps = 0

    def launch(self, batch: ScheduledBatch) -> FakePendingTokens:
        start = max(time.perf_counter_ns(), self.busy_until_ns)
        self.busy_until_ns = start + self.step_ns + self.per_seq_ns * len(batch.seqs)
        self.num_steps += 1
        ids = self.rng.choices(self.token_ids, k=sum(batch.is_sampled))
        return FakePendingTokens(ids, self.busy_until_ns)


def make_fake_engine(config: EngineConfig, telemetry, **fake):
    """`EngineCore`'s `make_engine`: `functools.partial(make_fake_engine, step_us=..., per_seq_us=..., tokens=...)`.
    Runs in the engine process, the only one that loads torch (LLMEngine's module)."""
    return fake_engine_class()(config, telemetry, **fake)


@functools.cache
def fake_engine_class() -> type:
    """`FakeTimedEngine`, a subclass of LLMEngine, defined on first use: importing this module stays torch-free, as
    the API process must."""
    # imported on use: torch 5376 ms to import
    from budgetscope.engine.llm_engine import LLMEngine

    class FakeTimedEngine(LLMEngine):
        """An LLMEngine without a model: the real scheduler and step logic, a FakeTimedRunner for the device."""

        def __init__(
            self,
            config: EngineConfig,
            telemetry: Telemetry | None = None,
            *,
            step_us: float,
            per_seq_us: float = 0.0,
            tokens: str = "vocab",
            seed: int = 0,
        ):
            if tokens not in TOKEN_KINDS:
                raise ValueError(f"tokens must be one of {', '.join(TOKEN_KINDS)}, not {tokens!r}")
            self.config = config
            self.telemetry = telemetry or Telemetry(None)
            self.metrics = EngineMetrics()
            self.device = FakeDevice()
            self._adopt_front(Frontend(config, self.telemetry, self.metrics))
            self.block_manager = BlockManager(config.num_kv_blocks, config.block_size, config.enable_prefix_caching)
            self.scheduler = Scheduler(config, self.block_manager)
            self._inflight = None
            # the engine process resolves "auto" to on for a device that runs behind the host: so does the fake
            self.async_scheduling = config.async_scheduling is not False
            if tokens == "ascii":
                ids = list(range(32, 127))
            else:
                ids = [i for i in range(self.model_config.vocab_size) if i not in self.eos_token_ids]
            self.runner = FakeTimedRunner(step_us, per_seq_us, ids, seed)

        @property
        def runs_behind_host(self) -> bool:
            return True

    return FakeTimedEngine

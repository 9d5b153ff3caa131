"""The fused decode kernels (rotary + K/V write, SiLU(gate) * up) equal the torch ops they replace, alone and in a
whole `tiny` forward over the paged cache (CPU: Triton's interpreter, float32/float16; on a GPU bfloat16 too)."""

from __future__ import annotations

import pytest

from triton_setup import kernel_device, kernel_dtypes, kernel_tolerance

DEVICE = kernel_device()
torch = pytest.importorskip("torch")

import torch.nn.functional as F

from budgetscope.engine.batch import StepBuffer, StepShape
from budgetscope.engine.fused_activation import silu_mul
from budgetscope.engine.fused_rope import rope_write_kv
from budgetscope.engine.kv_cache import KVCache
from budgetscope.engine.model import LlamaForCausalLM, RotaryEmbedding, _rope
from budgetscope.engine.model_config import ModelConfig, named_config

DTYPES = kernel_dtypes(DEVICE)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,width", [(1, 768), (5, 1500), (0, 64)])
def test_silu_mul_matches_torch(dtype, rows, width):
    gen = torch.Generator().manual_seed(rows + width)
    gate_up = (2 * torch.randn(rows, 2 * width, generator=gen)).to(DEVICE, dtype)
    gate, up = gate_up.chunk(2, dim=-1)
    got = silu_mul(gate_up)
    assert got.shape == (rows, width) and got.dtype == dtype
    want = F.silu(gate.float()) * up.float()  # float32 from the same inputs: torch's bf16 ops round more often
    torch.testing.assert_close(got.float(), want, **kernel_tolerance(dtype))


def _rope_case(heads, kv_heads, dim, tokens, dtype, seed=0):
    """qkv as the fused GEMM gives it, cos/sin looked up as the model does, caches and a slot for each token."""
    gen = torch.Generator().manual_seed(seed)
    config = ModelConfig(num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=dim, rope_theta=500000.0)
    positions = torch.randint(0, 2000, (tokens,), generator=gen)
    cos, sin = RotaryEmbedding(config)(positions, dtype)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, generator=gen).to(DEVICE, dtype)
    slots = torch.randperm(64, generator=gen)[:tokens].to(DEVICE)
    caches = [torch.randn(64, kv_heads, dim, generator=gen).to(DEVICE, dtype) for _ in range(2)]
    return qkv, (cos.to(DEVICE), sin.to(DEVICE)), slots, caches


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads,kv_heads,dim", [(8, 2, 32), (6, 2, 64), (4, 4, 48)])
@pytest.mark.parametrize("tokens", [1, 7])
def test_rope_write_kv_matches_torch(dtype, heads, kv_heads, dim, tokens):
    qkv, rope, slots, (k_cache, v_cache) = _rope_case(heads, kv_heads, dim, tokens, dtype, seed=heads * dim + tokens)
    q, k, v = qkv.float().split((heads * dim, kv_heads * dim, kv_heads * dim), dim=-1)  # the reference in float32
    want_q, want_k = _rope(q.view(tokens, heads, dim), k.view(tokens, kv_heads, dim), [t.float() for t in rope])
    want_k_cache, want_v_cache = k_cache.float(), v_cache.clone()
    want_k_cache.index_copy_(0, slots, want_k)
    want_v_cache.index_copy_(0, slots, v.view(tokens, kv_heads, dim).to(dtype))

    got_q = rope_write_kv(qkv, *rope, slots, k_cache, v_cache, heads, kv_heads)
    assert got_q.shape == (tokens, heads, dim) and got_q.data_ptr() == qkv.data_ptr()  # rotated in place
    torch.testing.assert_close(got_q.float(), want_q, **kernel_tolerance(dtype))
    torch.testing.assert_close(k_cache.float(), want_k_cache, **kernel_tolerance(dtype))
    torch.testing.assert_close(v_cache, want_v_cache, rtol=0, atol=0)  # v is copied, not computed


def test_rope_write_kv_with_no_tokens_launches_nothing():
    qkv, rope, slots, (k_cache, v_cache) = _rope_case(8, 2, 32, 1, torch.float32)
    before = k_cache.clone()
    q = rope_write_kv(qkv[:0], rope[0][:0], rope[1][:0], slots[:0], k_cache, v_cache, 8, 2)
    assert q.shape == (0, 8, 32)
    torch.testing.assert_close(k_cache, before, rtol=0, atol=0)


class _Seq:
    """What pack_step reads of a sequence (a fake: no Sequence, no scheduler)."""

    def __init__(self, token_ids, num_computed_tokens, block_table):
        self.token_ids, self.num_computed_tokens, self.block_table = token_ids, num_computed_tokens, block_table


def _paged_steps(model, config, dtype):
    """Two steps on a fresh paged cache: two prompt chunks, then a decode row beside a chunk after cached
    context; (each step's logits of its last rows, the caches) for `model` as it is set."""
    kv = KVCache(config, num_blocks=8, block_size=16, dtype=dtype, device=DEVICE)
    buf = StepBuffer(StepShape(64, 3, 4, 2).size, torch.device(DEVICE))
    gen = torch.Generator().manual_seed(3)
    a = _Seq(torch.randint(0, config.vocab_size, (24,), generator=gen).tolist(), 0, [5, 2])
    b = _Seq(torch.randint(0, config.vocab_size, (30,), generator=gen).tolist(), 0, [0, 7])
    logits = []
    for num_new, computed in (([19, 9], [0, 0]), ([1, 21], [19, 9])):
        a.num_computed_tokens, b.num_computed_tokens = computed
        batch = buf.pack(StepShape(32, 3, 4, 2), [a, b], num_new, [True, True], 16, kv.scratch_block)
        with torch.inference_mode():
            hidden = model(batch.input_ids, batch.positions, batch, kv.layers)
            logits.append(model.compute_logits(hidden[batch.logits_rows]))
    return logits, kv.layers


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_tiny_forward_fused_equals_unfused(dtype):
    """A `tiny` model over the paged cache (the "triton" attention kernel both times): the fused kernels give the
    logits and the cache contents of the torch ops, padding rows and a chunk after cached context included."""
    config = named_config("tiny")
    model = LlamaForCausalLM(config).init_random(0).to(DEVICE, dtype).eval().fuse_projections()
    want_logits, want_cache = _paged_steps(model, config, dtype)
    model.use_triton()
    assert model.model.layers[0].self_attn.fused and model.model.layers[0].mlp.fused
    got_logits, got_cache = _paged_steps(model, config, dtype)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    for got, want in zip(got_logits, want_logits):
        torch.testing.assert_close(got, want, **tol)
        if dtype == torch.float32:  # float16's rounding may swap two near-equal top logits; float32's does not
            assert torch.equal(got.argmax(-1), want.argmax(-1))
    for (gk, gv), (wk, wv) in zip(got_cache, want_cache):
        torch.testing.assert_close(gk.float(), wk.float(), **tol)
        torch.testing.assert_close(gv.float(), wv.float(), **tol)


@pytest.mark.gpu
def test_fused_kernels_replay_from_a_cuda_graph():
    """Captured once, replayed over new inputs written in place: the results follow the inputs (no host reads)."""
    if DEVICE != "cuda":
        pytest.skip("no CUDA GPU here")
    qkv, rope, slots, (k_cache, v_cache) = _rope_case(8, 2, 64, 4, torch.bfloat16)
    gate_up = torch.randn(4, 2 * 768, device=DEVICE, dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: Triton compiles outside the capture
        rope_write_kv(qkv.clone(), *rope, slots, k_cache.clone(), v_cache.clone(), 8, 2)
        silu_mul(gate_up)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        q = rope_write_kv(qkv, *rope, slots, k_cache, v_cache, 8, 2)
        act = silu_mul(gate_up)
    gen = torch.Generator().manual_seed(9)
    for t in (qkv, *rope, gate_up):
        t.copy_(torch.randn(t.shape, generator=gen))
    slots.copy_(torch.randperm(64, generator=gen)[:4])
    want_k, want_v = k_cache.clone(), v_cache.clone()
    want_q = rope_write_kv(qkv.clone(), *rope, slots, want_k, want_v, 8, 2)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(q, want_q, rtol=0, atol=0)
    torch.testing.assert_close(k_cache, want_k, rtol=0, atol=0)
    torch.testing.assert_close(v_cache, want_v, rtol=0, atol=0)
    torch.testing.assert_close(act, silu_mul(gate_up), rtol=0, atol=0)

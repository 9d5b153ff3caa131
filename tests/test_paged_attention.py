"""The paged-attention Triton kernel equals a float64 plain-softmax reference on mixed batches.

Without a CUDA GPU the kernel runs in Triton's CPU interpreter (TRITON_INTERPRET=1; float32 and float16: the
interpreter's bfloat16 tl.dot is not exact); with one, compiled on the GPU (bfloat16 too). Every batch mixes decode rows, prompt chunks with and without cached context, a prefix-cache
hit (pages shared with another sequence), GQA groups, pages scattered over the cache and padding sequences with no
queries. Skipped where Triton does not import.
"""

from __future__ import annotations

import pytest

from triton_setup import kernel_device, kernel_dtypes, kernel_tolerance

DEVICE = kernel_device()
torch = pytest.importorskip("torch")

from budgetscope.engine.paged_attention import kv_splits, paged_attention, paged_attention_reference

BLOCK = 16


def mixed_batch(seed, heads, kv_heads, dim, dtype, specs, pad_seqs=2, num_blocks=64):
    """q, caches and metadata for sequences of (new tokens, cached tokens); pages drawn at random.

    A spec with a third item `share` reuses the first `share` pages of sequence 0 (a prefix-cache hit)."""
    gen = torch.Generator().manual_seed(seed)
    k_cache = torch.randn(num_blocks * BLOCK, kv_heads, dim, generator=gen).to(DEVICE, dtype)
    v_cache = torch.randn(num_blocks * BLOCK, kv_heads, dim, generator=gen).to(DEVICE, dtype)
    free = torch.randperm(num_blocks, generator=gen).tolist()
    width = max(-(-(spec[0] + spec[1]) // BLOCK) for spec in specs) + 1
    tables, lens, starts = [], [], [0]
    for spec in specs:
        new, cached, share = (*spec, 0)[:3]
        pages = -(-(new + cached) // BLOCK)
        table = (tables[0][:share] if share else []) + [free.pop() for _ in range(pages - share)]
        tables.append(table + [free[-1]] * (width - len(table)))  # unused entries: some other block
        lens.append(new + cached)
        starts.append(starts[-1] + new)
    for _ in range(pad_seqs):  # padding: no queries, no context
        tables.append([0] * width)
        lens.append(0)
        starts.append(starts[-1])
    q = torch.randn(starts[-1], heads, dim, generator=gen).to(DEVICE, dtype)
    meta = (
        torch.tensor(starts, device=DEVICE),
        torch.tensor(lens, device=DEVICE),
        torch.tensor(tables, dtype=torch.int32, device=DEVICE),
    )
    return q, k_cache, v_cache, meta


SPECS = [
    (1, 37),  # decode row
    (20, 0),  # prompt chunk, nothing cached
    (1, 1),  # decode row at position 1
    (9, 33),  # chunk after cached context (mid-page start)
    (21, 32, 2),  # prefix-cache hit: two full pages of sequence 0, then its own
    (1, 16),  # decode row opening a new page
    (3, 64),  # short chunk after four pages
]


DTYPES = kernel_dtypes(DEVICE)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads,kv_heads", [(8, 2), (4, 4), (6, 2)])
@pytest.mark.parametrize("dim", [64, 128])
def test_kernel_matches_reference(dtype, heads, kv_heads, dim):
    q, k, v, meta = mixed_batch(heads * dim + (dtype == torch.float16), heads, kv_heads, dim, dtype, SPECS)
    got = paged_attention(q, k, v, *meta, BLOCK)
    want = paged_attention_reference(q, k, v, *meta, BLOCK)
    assert got.dtype == dtype and got.shape == q.shape
    torch.testing.assert_close(got.cpu().double(), want, **kernel_tolerance(dtype))


def test_decode_only_and_prefill_only_batches():
    for specs in ([(1, 5), (1, 70), (1, 15)], [(40, 0), (17, 0)]):
        q, k, v, meta = mixed_batch(3, 8, 2, 64, torch.float32, specs, pad_seqs=0)
        torch.testing.assert_close(
            paged_attention(q, k, v, *meta, BLOCK).cpu().double(),
            paged_attention_reference(q, k, v, *meta, BLOCK),
            rtol=1e-5,
            atol=1e-5,
        )


def test_tile_of_one_page_and_strided_queries():
    """A key tile of one page, and q as a slice of a wider tensor (as the rotary output is)."""
    q, k, v, meta = mixed_batch(5, 8, 2, 64, torch.float32, SPECS)
    wide = torch.cat((q, torch.zeros(q.shape[0], 2, 64, device=DEVICE)), dim=1)
    got = paged_attention(wide[:, :8], k, v, *meta, BLOCK, tile_n=16)
    torch.testing.assert_close(
        got.cpu().double(), paged_attention_reference(q, k, v, *meta, BLOCK), rtol=1e-5, atol=1e-5
    )


def test_padding_rows_past_the_last_sequence_are_left_alone():
    """Query rows no sequence owns (a padded step's tail) are not written; the real rows are right."""
    q, k, v, meta = mixed_batch(9, 8, 2, 64, torch.float32, SPECS)
    padded = torch.cat((q, torch.randn(13, 8, 64, device=DEVICE)))
    out = torch.full_like(padded, 7.0)
    paged_attention(padded, k, v, *meta, BLOCK, out=out)
    torch.testing.assert_close(
        out[: q.shape[0]].cpu().double(), paged_attention_reference(q, k, v, *meta, BLOCK), rtol=1e-5, atol=1e-5
    )
    assert bool((out[q.shape[0] :] == 7.0).all())


def test_no_tokens_launches_nothing():
    q, k, v, meta = mixed_batch(1, 8, 2, 64, torch.float32, [(1, 3)])
    assert paged_attention(q[:0], k, v, *meta, BLOCK).shape == (0, 8, 64)


LONG_SPECS = [(1, 300), (1, 129), (1, 16), (5, 200), (40, 0), (1, 0)]  # decode rows over many pages, chunks


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("tile_n,num_warps,num_stages", [(16, 2, 1), (64, 4, 2), (128, 8, 3)])
def test_launch_configurations_agree(dtype, tile_n, num_warps, num_stages):
    """Every tile width (one page, several pages, more keys than some contexts) with explicit warps and stages."""
    q, k, v, meta = mixed_batch(11, 8, 2, 64, dtype, LONG_SPECS, num_blocks=64)
    got = paged_attention(q, k, v, *meta, BLOCK, tile_n=tile_n, num_warps=num_warps, num_stages=num_stages)
    want = paged_attention_reference(q, k, v, *meta, BLOCK)
    torch.testing.assert_close(got.cpu().double(), want, **kernel_tolerance(dtype))


def test_launch_defaults_from_environment():
    from budgetscope.engine.paged_attention import launch_defaults

    assert launch_defaults({}) == {"tile_n": None, "num_warps": None, "num_stages": None}
    env = {"BUDGETSCOPE_ATTN_TILE_N": "128", "BUDGETSCOPE_ATTN_WARPS": " 8", "BUDGETSCOPE_ATTN_STAGES": ""}
    assert launch_defaults(env) == {"tile_n": 128, "num_warps": 8, "num_stages": None}


@pytest.mark.parametrize(
    "var,value,message",
    [
        ("BUDGETSCOPE_ATTN_TILE_N", "48", "BUDGETSCOPE_ATTN_TILE_N='48': tile_n must be a power of two >= 16"),
        ("BUDGETSCOPE_ATTN_TILE_N", "8", "BUDGETSCOPE_ATTN_TILE_N='8': tile_n must be a power of two >= 16"),
        ("BUDGETSCOPE_ATTN_WARPS", "3", "BUDGETSCOPE_ATTN_WARPS='3': num_warps must be a power of two"),
        ("BUDGETSCOPE_ATTN_STAGES", "0", "BUDGETSCOPE_ATTN_STAGES='0': num_stages must be >= 1"),
        ("BUDGETSCOPE_ATTN_STAGES", "two", "BUDGETSCOPE_ATTN_STAGES='two': invalid literal"),
    ],
)
def test_bad_launch_environment_is_refused_by_name(var, value, message):
    from budgetscope.engine.paged_attention import launch_defaults

    with pytest.raises(ValueError) as caught:
        launch_defaults({var: value})
    assert str(caught.value).startswith(message)


def test_bad_launch_argument_is_refused_before_launching():
    q, k, v, meta = mixed_batch(1, 8, 2, 64, torch.float32, [(1, 3)])
    out = torch.full_like(q, 7.0)
    with pytest.raises(ValueError, match=r"tile_n must be a power of two >= 16 \(the smallest tl.dot tile\), got 24"):
        paged_attention(q, k, v, *meta, BLOCK, out=out, tile_n=24)
    assert bool((out == 7.0).all())  # nothing ran


# -- split-KV ("flash-decoding"): each query's keys cut into runs computed by separate programs, then merged --------
DECODE_SPECS = [(1, 300), (1, 0), (1, 16), (1, 37), (1, 129)]  # decode rows: long, first token, page edges, odd


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads,kv_heads", [(8, 2), (4, 4), (6, 2)])
@pytest.mark.parametrize("splits", [2, 8])
def test_split_kv_matches_reference(dtype, heads, kv_heads, splits):
    """Decode rows over odd context lengths on scattered pages, GQA 4:1, 1:1 and 3:1, with padding sequences: more
    runs than some contexts have tiles (runs that see no key), runs of several tiles."""
    q, k, v, meta = mixed_batch(splits * heads + kv_heads, heads, kv_heads, 64, dtype, DECODE_SPECS, num_blocks=64)
    assert kv_splits(q.shape[0], kv_heads, splits) > 1  # the split path runs
    got = paged_attention(q, k, v, *meta, BLOCK, tile_n=16, kv_splits_max=splits)
    want = paged_attention_reference(q, k, v, *meta, BLOCK)
    assert got.dtype == dtype and got.shape == q.shape
    torch.testing.assert_close(got.cpu().double(), want, **kernel_tolerance(dtype))


def test_split_kv_more_runs_than_tiles():
    """32 runs over contexts of 1–301 keys: most runs see no key at all and add nothing."""
    q, k, v, meta = mixed_batch(32, 8, 2, 64, torch.float32, DECODE_SPECS[:3], pad_seqs=1, num_blocks=32)
    got = paged_attention(q, k, v, *meta, BLOCK, kv_splits_max=32)
    torch.testing.assert_close(
        got.cpu().double(), paged_attention_reference(q, k, v, *meta, BLOCK), rtol=1e-5, atol=1e-5
    )


def test_split_kv_with_chunks_and_untouched_padding_rows():
    """Short chunks (a graph step's padding sequence has several queries) after cached context and not, with rows
    no sequence owns left alone, with the default tile."""
    q, k, v, meta = mixed_batch(21, 8, 2, 64, torch.float32, [(1, 200), (3, 0), (4, 45), (1, 1)])
    padded = torch.cat((q, torch.randn(5, 8, 64, device=DEVICE)))
    out = torch.full_like(padded, 7.0)
    assert kv_splits(padded.shape[0], 2, 4) == 4
    paged_attention(padded, k, v, *meta, BLOCK, out=out, kv_splits_max=4)
    want = paged_attention_reference(q, k, v, *meta, BLOCK)
    torch.testing.assert_close(out[: q.shape[0]].cpu().double(), want, rtol=1e-5, atol=1e-5)
    assert bool((out[q.shape[0] :] == 7.0).all())


def test_split_kv_off_and_bounds():
    """Off by default (until a GPU measures it), off past the token bound, and the fewest splits for the target."""
    from budgetscope.engine.paged_attention import split_defaults

    assert kv_splits(1, 8, 0) == 1 and kv_splits(1, 8, 1) == 1
    assert kv_splits(1, 8, 64) == 32 and kv_splits(1, 8, 16) == 16 and kv_splits(4, 8, 64) == 8
    assert kv_splits(17, 8, 64) == 1 and kv_splits(17, 8, 64, max_tokens=32) == 2
    assert split_defaults({}) == {"max_splits": None, "max_tokens": None}
    env = {"BUDGETSCOPE_ATTN_KV_SPLITS": "16", "BUDGETSCOPE_ATTN_SPLIT_MAX_TOKENS": "8"}
    assert split_defaults(env) == {"max_splits": 16, "max_tokens": 8}
    with pytest.raises(ValueError, match=r"^BUDGETSCOPE_ATTN_KV_SPLITS='12': kv splits must be 0 \(off\) or a power"):
        split_defaults({"BUDGETSCOPE_ATTN_KV_SPLITS": "12"})
    with pytest.raises(ValueError, match=r"^BUDGETSCOPE_ATTN_SPLIT_MAX_TOKENS='0': must be >= 1"):
        split_defaults({"BUDGETSCOPE_ATTN_SPLIT_MAX_TOKENS": "0"})


def test_split_kv_no_tokens_launches_nothing():
    q, k, v, meta = mixed_batch(1, 8, 2, 64, torch.float32, [(1, 3)])
    assert paged_attention(q[:0], k, v, *meta, BLOCK, kv_splits_max=8).shape == (0, 8, 64)

"""Attention over the paged KV cache in one Triton launch a layer: decode rows and prefill chunks together.

The step's query tokens are flattened: sequence s owns rows `query_start_loc[s]:query_start_loc[s+1]` of q, its
context (cached tokens plus this step's) is `seq_lens[s]` tokens long, and token j of it lives in cache slot
`block_tables[s, j // block_size] * block_size + j % block_size`. Query i of sequence s sits at position
`seq_lens[s] - q_len + i` and sees keys up to there (causal), so one kernel serves a decode row (q_len 1), a
prompt chunk with nothing cached, a chunk after cached context and a prefix-cache hit alike. K/V are read in
place through the block table: nothing is gathered into padded tensors, and nothing is planned per shape on the
host (the grid depends on the token and sequence counts only, so a CUDA graph can hold the launch).

Each program takes BLOCK_Q query tokens of one sequence for one KV head and packs them with the GQA group's
query heads into BLOCK_M = BLOCK_Q x group rows: the group shares each K/V tile it loads. It walks the context in
tiles of TILE_N keys (the page of each key looked up in the block table) with an online softmax in float32. The
grid has a fixed bound, `T // BLOCK_Q + S` programs per KV head: program p finds its sequence by binary search
over `query_start_loc[s] // BLOCK_Q + s` (where sequence s's query blocks start); programs past the end of their
sequence's queries, and sequences with no queries (padding), exit at once.

The kernel is wrapped with `triton.jit` on first use (`triton_support.kernel`). Its launch configuration (TILE_N,
num_warps, num_stages) is a keyword argument of `paged_attention`, defaulting to the environment variables
BUDGETSCOPE_ATTN_TILE_N, BUDGETSCOPE_ATTN_WARPS and BUDGETSCOPE_ATTN_STAGES read once at import, so that a
process (and the CUDA graphs it captures) keeps one configuration; unset, `DEFAULT_LAUNCH` (TILE_N 128, 4 warps,
2 stages: the fastest of 48 on an H200, and faster in the engine too; docs/engine.md, "Tuning").
"""

from __future__ import annotations

import os

import torch

from budgetscope.engine.triton_support import kernel, next_power_of_2, tl


def _paged_attention_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    out_ptr,
    part_acc_ptr,
    part_ml_ptr,
    query_start_loc_ptr,
    seq_lens_ptr,
    block_tables_ptr,
    scale,
    num_seqs,
    stride_qt,
    stride_qh,
    stride_ks,
    stride_kh,
    stride_vs,
    stride_vh,
    stride_ot,
    stride_oh,
    stride_bt,
    GROUP: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_M: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    PAGE: tl.constexpr,
    TILE_N: tl.constexpr,
    PRECISION: tl.constexpr,
    SPLITS: tl.constexpr,
):
    pid = tl.program_id(0)
    kv_head = tl.program_id(1)
    # Which sequence: the last s with query_start_loc[s] // BLOCK_Q + s <= pid.
    lo = 0
    hi = num_seqs
    while lo < hi:
        mid = (lo + hi) // 2
        first_block = tl.load(query_start_loc_ptr + mid).to(tl.int32) // BLOCK_Q + mid
        if first_block <= pid:
            lo = mid + 1
        else:
            hi = mid
    seq = lo - 1
    q_begin = tl.load(query_start_loc_ptr + seq).to(tl.int32)
    q_len = tl.load(query_start_loc_ptr + seq + 1).to(tl.int32) - q_begin
    q_first = (pid - (q_begin // BLOCK_Q + seq)) * BLOCK_Q  # this program's first query of the sequence
    if q_first >= q_len:
        return
    seq_len = tl.load(seq_lens_ptr + seq).to(tl.int32)
    context = seq_len - q_len  # tokens cached before this step's queries

    rows = tl.arange(0, BLOCK_M)
    query = q_first + rows // GROUP  # [BLOCK_M] query index within the sequence
    head = kv_head * GROUP + rows % GROUP
    # rows past BLOCK_Q x GROUP (a group that does not divide BLOCK_M) hold the next program's queries: not ours
    row_ok = (query < q_len) & (rows < BLOCK_Q * GROUP)
    dims = tl.arange(0, HEAD_DIM_PAD)
    dim_ok = dims < HEAD_DIM
    token = q_begin + query
    q = tl.load(
        q_ptr + token[:, None] * stride_qt + head[:, None] * stride_qh + dims[None, :],
        mask=row_ok[:, None] & dim_ok[None, :],
        other=0.0,
    )
    query_pos = context + query  # absolute position: sees keys 0..query_pos

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PAD], tl.float32)
    qk_scale = scale * 1.4426950408889634  # log2(e): exp2 below
    # Keys past the last query of this block are never seen by it.
    num_keys = context + q_first + BLOCK_Q
    if num_keys > seq_len:
        num_keys = seq_len
    first_key = 0
    if SPLITS > 1:  # split-KV: this program takes one of SPLITS equal runs of whole tiles of those keys
        split = tl.program_id(2)
        split_keys = tl.cdiv(tl.cdiv(num_keys, SPLITS), TILE_N) * TILE_N
        first_key = split * split_keys
        if num_keys > first_key + split_keys:
            num_keys = first_key + split_keys
    for start in range(first_key, num_keys, TILE_N):
        keys = start + tl.arange(0, TILE_N)
        key_ok = keys < num_keys
        page = tl.load(block_tables_ptr + seq * stride_bt + keys // PAGE, mask=key_ok, other=0).to(tl.int64)
        slot = page * PAGE + keys % PAGE
        k = tl.load(
            k_ptr + slot[None, :] * stride_ks + kv_head * stride_kh + dims[:, None],
            mask=key_ok[None, :] & dim_ok[:, None],
            other=0.0,
        )  # [HEAD_DIM_PAD, TILE_N]
        s = tl.dot(q, k, input_precision=PRECISION) * qk_scale
        visible = key_ok[None, :] & (keys[None, :] <= query_pos[:, None])
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_new = tl.where(m_new > float("-inf"), m_new, 0.0)  # a row with nothing visible yet: no NaN
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(
            v_ptr + slot[:, None] * stride_vs + kv_head * stride_vh + dims[None, :],
            mask=key_ok[:, None] & dim_ok[None, :],
            other=0.0,
        )  # [TILE_N, HEAD_DIM_PAD]
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new
    if (
        SPLITS > 1
    ):  # the run's unnormalised sum, its running max and sum of weights; _paged_attention_reduce_kernel adds up
        part = (token * (GROUP * tl.num_programs(1)) + head) * SPLITS + split  # [tokens, heads, SPLITS]
        tl.store(part_acc_ptr + part[:, None] * HEAD_DIM_PAD + dims[None, :], acc, mask=row_ok[:, None])
        tl.store(part_ml_ptr + part * 2, m_i, mask=row_ok)
        tl.store(part_ml_ptr + part * 2 + 1, l_i, mask=row_ok)
    else:
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        tl.store(
            out_ptr + token[:, None] * stride_ot + head[:, None] * stride_oh + dims[None, :],
            out.to(out_ptr.dtype.element_ty),
            mask=row_ok[:, None] & dim_ok[None, :],
        )


def _paged_attention_reduce_kernel(
    out_ptr,
    part_acc_ptr,
    part_ml_ptr,
    query_start_loc_ptr,
    num_seqs,
    stride_ot,
    stride_oh,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    SPLITS: tl.constexpr,
):
    """Split-KV's second half: one program per (query token, head) merges the SPLITS runs' partial softmaxes."""
    token = tl.program_id(0)
    head = tl.program_id(1)
    if token >= tl.load(query_start_loc_ptr + num_seqs):  # a row no sequence owns (a padded step's tail)
        return
    part = (token * tl.num_programs(1) + head) * SPLITS + tl.arange(0, SPLITS)
    m = tl.load(part_ml_ptr + part * 2)
    weight_sum = tl.load(part_ml_ptr + part * 2 + 1)
    m = tl.where(weight_sum > 0, m, float("-inf"))  # a run that saw no key adds nothing
    m_max = tl.max(m, axis=0)
    m_max = tl.where(m_max > float("-inf"), m_max, 0.0)
    scale = tl.exp2(m - m_max)  # [SPLITS]
    dims = tl.arange(0, HEAD_DIM_PAD)
    acc = tl.load(part_acc_ptr + part[:, None] * HEAD_DIM_PAD + dims[None, :])  # [SPLITS, HEAD_DIM_PAD]
    total = tl.sum(weight_sum * scale, axis=0)
    out = tl.sum(acc * scale[:, None], axis=0) / tl.where(total > 0, total, 1.0)
    tl.store(
        out_ptr + token * stride_ot + head * stride_oh + dims, out.to(out_ptr.dtype.element_ty), mask=dims < HEAD_DIM
    )


DEFAULT_LAUNCH = {"tile_n": 128, "num_warps": 4, "num_stages": 2}
"""The launch where no BUDGETSCOPE_ATTN_* variable says otherwise. Chosen on an H200 (2026-11-28): 88 % of copy
bandwidth on a 256-row long-context decode step (32/4/3, the earlier default: 67 %), and in the `1b` engine a
decode-only step of ~59 sequences 2.38 ms against 2.60 ms, 28,134 against 27,706 output tok/s at 64 sequences."""
ENV_VARS = {
    "tile_n": "BUDGETSCOPE_ATTN_TILE_N",
    "num_warps": "BUDGETSCOPE_ATTN_WARPS",
    "num_stages": "BUDGETSCOPE_ATTN_STAGES",
}


def check_launch(tile_n: int | None, num_warps: int | None, num_stages: int | None) -> None:
    """Raise ValueError naming the first value a launch cannot take (None: the default, always fine)."""
    if tile_n is not None and (tile_n < 16 or tile_n & (tile_n - 1)):
        raise ValueError(f"tile_n must be a power of two >= 16 (the smallest tl.dot tile), got {tile_n}")
    if num_warps is not None and (num_warps < 1 or num_warps > 32 or num_warps & (num_warps - 1)):
        raise ValueError(f"num_warps must be a power of two in 1..32, got {num_warps}")
    if num_stages is not None and num_stages < 1:
        raise ValueError(f"num_stages must be >= 1, got {num_stages}")


def launch_defaults(environ=os.environ) -> dict[str, int | None]:
    """{tile_n, num_warps, num_stages} from the BUDGETSCOPE_ATTN_* variables; None where unset (`DEFAULT_LAUNCH`).

    An unreadable value raises ValueError naming the variable (at import: a misconfigured process fails at once,
    not mid-serving)."""
    values: dict[str, int | None] = {}
    for key, var in ENV_VARS.items():
        text = environ.get(var, "").strip()
        try:
            values[key] = int(text) if text else None
            check_launch(**{"tile_n": None, "num_warps": None, "num_stages": None, key: values[key]})
        except ValueError as e:
            raise ValueError(f"{var}={text!r}: {e}") from None
    return values


LAUNCH = launch_defaults()  # read once: every launch of this process has the same configuration

SPLIT_ENV_VARS = {"max_splits": "BUDGETSCOPE_ATTN_KV_SPLITS", "max_tokens": "BUDGETSCOPE_ATTN_SPLIT_MAX_TOKENS"}
DEFAULT_SPLIT_MAX_TOKENS = 16
"""Steps of at most this many query tokens are split when split-KV is on and BUDGETSCOPE_ATTN_SPLIT_MAX_TOKENS is
unset: decode steps of up to 16 sequences, whose grid of one program a sequence and KV head leaves most SMs idle."""
SPLIT_TARGET_PROGRAMS = 256
"""Split-KV aims at about this many programs a launch (twice an H100/H200's 132 SMs), in the fewest splits."""


def split_defaults(environ=os.environ) -> dict[str, int | None]:
    """{max_splits, max_tokens} from BUDGETSCOPE_ATTN_KV_SPLITS (a power of two; unset, 0 or 1: split-KV off, the
    default until a GPU measures it) and BUDGETSCOPE_ATTN_SPLIT_MAX_TOKENS (>= 1; unset: DEFAULT_SPLIT_MAX_TOKENS).
    An unreadable value raises ValueError naming the variable."""
    values: dict[str, int | None] = {}
    for key, var in SPLIT_ENV_VARS.items():
        text = environ.get(var, "").strip()
        try:
            values[key] = int(text) if text else None
            if key == "max_splits" and values[key] is not None:
                check_splits(values[key])
            if key == "max_tokens" and values[key] is not None and values[key] < 1:
                raise ValueError(f"must be >= 1, got {values[key]}")
        except ValueError as e:
            raise ValueError(f"{var}={text!r}: {e}") from None
    return values


def check_splits(max_splits: int) -> None:
    """Raise ValueError unless `max_splits` is 0 (off) or a power of two (tl.arange over the splits)."""
    if max_splits < 0 or (max_splits > 1 and max_splits & (max_splits - 1)):
        raise ValueError(f"kv splits must be 0 (off) or a power of two, got {max_splits}")


SPLIT = split_defaults()  # read once, as LAUNCH: a captured graph keeps the choice it was captured with


def kv_splits(tokens: int, kv_heads: int, max_splits: int | None = None, max_tokens: int | None = None) -> int:
    """How many runs split-KV cuts each query's keys into for a step of `tokens` query tokens: 1 (off) when
    `max_splits` (default: SPLIT) is below 2 or the step has more than `max_tokens` tokens; else the fewest, a power
    of two up to `max_splits`, that give about SPLIT_TARGET_PROGRAMS programs with one a token and KV head. From the
    shapes only, so each CUDA-graph bucket keeps its own."""
    max_splits = SPLIT["max_splits"] if max_splits is None else max_splits
    max_tokens = max_tokens or SPLIT["max_tokens"] or DEFAULT_SPLIT_MAX_TOKENS
    if not max_splits or max_splits < 2 or tokens > max_tokens:
        return 1
    splits = 1
    while splits < max_splits and tokens * kv_heads * splits < SPLIT_TARGET_PROGRAMS:
        splits *= 2
    return splits


def _block_m(group: int) -> int:
    """Rows a program packs: 16 (the smallest tl.dot tile), or the whole GQA group when it is larger."""
    return max(16, next_power_of_2(group))


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: torch.Tensor,
    block_size: int,
    scale: float | None = None,
    out: torch.Tensor | None = None,
    tile_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    kv_splits_max: int | None = None,
) -> torch.Tensor:
    """Causal attention of q [T, H, D] over the paged cache k_cache/v_cache [slots, KVH, D]; returns [T, H, D].

    query_start_loc [S+1] (cumulative query counts), seq_lens [S] (context incl. this step's tokens) and
    block_tables [S, W] are integer tensors on q's device; this step's K/V must already be in the cache. S may
    include padding sequences with no queries. Launches one kernel; reads no tensor value on the host.
    tile_n (keys a program loads per iteration), num_warps, num_stages: the launch configuration; None takes
    the process default (`LAUNCH`, from the BUDGETSCOPE_ATTN_* environment variables; else `DEFAULT_LAUNCH`).
    kv_splits_max: split-KV ("flash-decoding") for short steps — each query's keys cut into up to this many runs
    computed by separate programs, then merged by a second kernel (`kv_splits`); None takes the process default
    (BUDGETSCOPE_ATTN_KV_SPLITS: off unless set), 0 or 1 turns it off.
    """
    tile_n = tile_n if tile_n is not None else LAUNCH["tile_n"] or DEFAULT_LAUNCH["tile_n"]
    num_warps = num_warps if num_warps is not None else LAUNCH["num_warps"] or DEFAULT_LAUNCH["num_warps"]
    num_stages = num_stages if num_stages is not None else LAUNCH["num_stages"] or DEFAULT_LAUNCH["num_stages"]
    check_launch(tile_n, num_warps, num_stages)
    options = {k: v for k, v in (("num_warps", num_warps), ("num_stages", num_stages)) if v is not None}
    tokens, heads, dim = q.shape
    kv_heads = k_cache.shape[1]
    group = heads // kv_heads
    block_m = _block_m(group)
    block_q = block_m // group
    num_seqs = seq_lens.shape[0]
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device) if out is None else out
    if tokens == 0:
        return out
    assert q.stride(2) == 1 and k_cache.stride(2) == 1 and v_cache.stride(2) == 1 and out.stride(2) == 1
    assert block_tables.stride(1) == 1
    splits = kv_splits(tokens, kv_heads, kv_splits_max)
    head_dim_pad = max(16, next_power_of_2(dim))
    part_acc = part_ml = out  # unused placeholders without splits
    if splits > 1:
        part_acc = torch.empty((tokens, heads, splits, head_dim_pad), dtype=torch.float32, device=q.device)
        part_ml = torch.empty((tokens, heads, splits, 2), dtype=torch.float32, device=q.device)
    grid = (tokens // block_q + num_seqs, kv_heads) + ((splits,) if splits > 1 else ())
    kernel(_paged_attention_kernel, ("num_seqs",))[grid](
        q,
        k_cache,
        v_cache,
        out,
        part_acc,
        part_ml,
        query_start_loc,
        seq_lens,
        block_tables,
        scale if scale is not None else dim**-0.5,
        num_seqs,
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        v_cache.stride(0),
        v_cache.stride(1),
        out.stride(0),
        out.stride(1),
        block_tables.stride(0),
        GROUP=group,
        BLOCK_Q=block_q,
        BLOCK_M=block_m,
        HEAD_DIM=dim,
        HEAD_DIM_PAD=head_dim_pad,
        PAGE=block_size,
        TILE_N=tile_n,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        SPLITS=splits,
        **options,
    )
    if splits > 1:
        kernel(_paged_attention_reduce_kernel, ("num_seqs",))[(tokens, heads)](
            out,
            part_acc,
            part_ml,
            query_start_loc,
            num_seqs,
            out.stride(0),
            out.stride(1),
            HEAD_DIM=dim,
            HEAD_DIM_PAD=head_dim_pad,
            SPLITS=splits,
        )
    return out


def paged_attention_reference(
    q, k_cache, v_cache, query_start_loc, seq_lens, block_tables, block_size, scale: float | None = None
) -> torch.Tensor:
    """The same attention in plain float64 PyTorch, sequence by sequence (tests; reads the metadata on the host)."""
    q, k_cache, v_cache = q.cpu(), k_cache.cpu(), v_cache.cpu()
    heads, dim = q.shape[1], q.shape[2]
    group = heads // k_cache.shape[1]
    scale = scale if scale is not None else dim**-0.5
    out = torch.zeros(q.shape, dtype=torch.float64)
    starts, lens, tables = query_start_loc.tolist(), seq_lens.tolist(), block_tables.tolist()
    for s, seq_len in enumerate(lens):
        begin, end = starts[s], starts[s + 1]
        if end == begin:
            continue
        pos = torch.arange(seq_len)
        slots = torch.tensor(tables[s])[pos // block_size] * block_size + pos % block_size
        k = k_cache[slots].double().repeat_interleave(group, dim=1)  # [L, H, D]
        v = v_cache[slots].double().repeat_interleave(group, dim=1)
        qs = q[begin:end].double()
        scores = torch.einsum("qhd,khd->hqk", qs, k) * scale
        query_pos = seq_len - (end - begin) + torch.arange(end - begin)
        scores = scores.masked_fill(pos[None, None, :] > query_pos[None, :, None], float("-inf"))
        out[begin:end] = torch.einsum("hqk,khd->qhd", scores.softmax(dim=-1), v)
    return out

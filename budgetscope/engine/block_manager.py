"""Paged KV blocks: allocation, reference counts, and the prefix cache with LRU eviction."""

from __future__ import annotations

from collections import OrderedDict

from budgetscope.engine.sequence import Sequence


class Block:
    __slots__ = ("block_id", "ref_count", "hash")

    def __init__(self, block_id: int):
        self.block_id = block_id
        self.ref_count = 0
        self.hash: int | None = None  # set once the block is full and its KV computed


class BlockManager:
    """Hands out fixed-size KV blocks to sequences and shares full ones between equal prefixes.

    A full block is keyed by a chained hash (hash of the previous block's key and this block's tokens), so
    a key names the whole prefix up to the block's end. A block whose last user leaves stays in the cache
    while it sits in the free list; the free list is LRU-ordered and allocation evicts from its front.
    """

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_ids: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.hash_to_block: dict[int, int] = {}
        self.num_evictions = 0

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        """Blocks that can be handed out now (cached-but-unused ones included)."""
        return len(self.free_ids)

    @property
    def num_used_blocks(self) -> int:
        return len(self.blocks) - len(self.free_ids)

    @property
    def usage(self) -> float:
        """Share of blocks held by sequences, 0-1."""
        return self.num_used_blocks / len(self.blocks)

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def match_prefix(self, seq: Sequence) -> list[int]:
        """Ids of cached blocks that hold seq's leading full blocks; no side effects.

        At least the last token is always left to compute, since its logits give the next token.
        """
        if not self.enable_prefix_caching:
            return []
        num_full = (seq.num_tokens - 1) // self.block_size
        hit: list[int] = []
        for h in self._hashes(seq, num_full):
            block_id = self.hash_to_block.get(h)
            if block_id is None:
                break
            hit.append(block_id)
        return hit

    def allocate(self, seq: Sequence, num_tokens: int, hit_blocks: list[int] = ()) -> bool:
        """Grow seq's block table to hold num_tokens tokens, first taking hit_blocks from the cache.

        Returns False, changing nothing, when too few blocks are free.
        """
        num_fresh = self.blocks_needed(num_tokens) - len(seq.block_table) - len(hit_blocks)
        num_hit_free = sum(1 for b in hit_blocks if self.blocks[b].ref_count == 0)
        if max(num_fresh, 0) + num_hit_free > len(self.free_ids):
            return False
        for block_id in hit_blocks:
            self._take(block_id)
        seq.block_table.extend(hit_blocks)
        seq.num_hashed_blocks += len(hit_blocks)
        for _ in range(num_fresh):
            seq.block_table.append(self._pop_free())
        return True

    def commit(self, seq: Sequence) -> None:
        """Register seq's newly completed full blocks in the prefix cache (those whose tokens are all known: with
        async scheduling a computed token may still be in flight, its id not yet read back)."""
        if not self.enable_prefix_caching:
            return
        num_full = min(seq.num_computed_tokens, seq.num_tokens) // self.block_size
        if num_full <= seq.num_hashed_blocks:
            return
        hashes = self._hashes(seq, num_full)
        for i in range(seq.num_hashed_blocks, num_full):
            block = self.blocks[seq.block_table[i]]
            if block.hash is None and hashes[i] not in self.hash_to_block:
                block.hash = hashes[i]
                self.hash_to_block[block.hash] = block.block_id
        seq.num_hashed_blocks = num_full

    def free(self, seq: Sequence) -> None:
        """Drop seq's hold on its blocks. Unhashed blocks go to the front of the free list (reused first);
        hashed ones to the back, tail blocks before head blocks, so shared prefixes are evicted last."""
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free_ids[block_id] = None
                if block.hash is None:
                    self.free_ids.move_to_end(block_id, last=False)
        seq.block_table = []
        seq.num_hashed_blocks = 0

    def _take(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:
            del self.free_ids[block_id]
        block.ref_count += 1

    def _pop_free(self) -> int:
        block_id, _ = self.free_ids.popitem(last=False)
        block = self.blocks[block_id]
        if block.hash is not None:
            self.num_evictions += 1
            if self.hash_to_block.get(block.hash) == block_id:
                del self.hash_to_block[block.hash]
            block.hash = None
        block.ref_count = 1
        return block_id

    def _hashes(self, seq: Sequence, num_full: int) -> list[int]:
        """seq's chained block hashes for its first num_full blocks, extending the memo on seq."""
        hashes, size, tokens = seq.block_hashes, self.block_size, seq.token_ids
        prev = hashes[-1] if hashes else 0x9E3779B9
        for i in range(len(hashes), num_full):
            prev = hash((prev, tuple(tokens[i * size : (i + 1) * size])))
            hashes.append(prev)
        return hashes[:num_full] if len(hashes) > num_full else hashes

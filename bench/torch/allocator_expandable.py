"""PyTorch's CUDA caching allocator under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, replayed.

The default allocator (allocator_replay.py) gives every large request that finds no cached block a segment of its own.
With expandable segments each stream's pool is one reserved virtual address range that the allocator maps with
physical pages as it grows (c10/cuda/CUDACachingAllocator.cpp, torch 2.x; `ExpandableSegment`). What differs, rule by
rule (function names are the allocator's):
  * pages: 20 MiB (kLargeBuffer) for the large pool, 2 MiB (kSmallBuffer) for the small one ("2MB for small pool,
    20MB for large pool"); `ExpandableSegment::map` maps whole pages from a page-aligned start, `unmap` only the pages
    wholly inside a range;
  * get_free_block: the smallest free mapped block at least as large as the request, then walked on to larger blocks
    while their `expandable_size` (the block plus an unmapped block right after it) is smaller;
  * alloc_block → try_allocate_expandable_block(size): find_expandable_block takes the lowest-address unmapped block
    whose free predecessor (if any) plus the free/unmapped blocks after it hold the request, maps what is missing
    (map_block: min(its size, the request), rounded up to pages) and merges it with the free neighbours; so a freed
    block at the end of the mapped range grows in place instead of leaving a hole;
  * should_split: any remainder of at least 512 B is split off (both pools);
  * release_cached_blocks (on a failed map, or `capacity`): every free block gives back the pages wholly inside it.
reserved = the mapped bytes (what torch.cuda.memory_reserved reports). One virtual range per (stream, pool) is
assumed large enough (torch reserves 1.125 × the device's memory per range and opens another when one is full).
"""
import bisect
import itertools

import allocator_replay as ar
from allocator_replay import MIN_BLOCK, SMALL_BUFFER, SMALL_SIZE, LARGE_BUFFER, FreeBlockIndex, round_size

VIRTUAL_RANGE = 1 << 50  # one stream's reserved address range: never the limit here


class Block(ar.Block):
    """A block of a pool's range; unmapped blocks hold address space only. `segment` is unused (one range per pool)."""
    __slots__ = ("mapped",)

    def __init__(self, size, ptr, pool, mapped):
        super().__init__(size, ptr, None, pool)
        self.mapped = mapped


class ExpandableAllocator(FreeBlockIndex):
    """`pools` index the free mapped blocks (cuda_mallocs counts page maps, releases the release passes)."""

    def __init__(self, capacity: int = 0):
        super().__init__(capacity)  # capacity: bytes the allocator may map; 0 = unlimited
        self.heads = {}  # (stream, small?) -> the first block of that pool's address range
        self._ranges = itertools.count()

    def _head(self, key) -> Block:
        if key not in self.heads:
            base = next(self._ranges) * VIRTUAL_RANGE
            self.heads[key] = Block(VIRTUAL_RANGE, base, key, mapped=False)
        return self.heads[key]

    @staticmethod
    def _page(key) -> int:
        return SMALL_BUFFER if key[1] else LARGE_BUFFER

    # FreeBlockIndex._merge's hooks: only blocks in the same mapped state merge (try_merge_blocks), only mapped ones
    # are in the free index, and a pool's first block is its head.
    def _mergeable(self, dst: Block, src: Block) -> bool:
        return src is not None and src.free and src.mapped == dst.mapped

    def _indexed(self, b: Block) -> bool:
        return b.mapped

    def _first_block_is(self, b: Block, old: Block) -> None:
        if self.heads.get(b.pool) is old:
            self.heads[b.pool] = b

    def _map(self, b: Block, size: int) -> Block:
        """map_block: map `size` bytes (rounded up to pages) at the start of unmapped block b; the rest stays unmapped."""
        page = self._page(b.pool)
        mapped = min(b.size, page * ((size + page - 1) // page))
        if self.capacity and self.reserved + mapped > self.capacity:
            self.release_cached_blocks()
            if self.reserved + mapped > self.capacity:
                raise MemoryError(f"expandable segments: mapping {mapped} B would pass {self.capacity} B")
        if mapped < b.size:
            rest = Block(b.size - mapped, b.ptr + mapped, b.pool, mapped=False)
            ar.splice_after(b, rest)
            b.size = mapped
        b.mapped = True
        self.reserved += mapped
        self.max_reserved = max(self.max_reserved, self.reserved)
        self.cuda_mallocs += 1
        self._merge(b, b.prev)
        self._merge(b, b.next)
        self._insert(b)
        return b

    def _get_free_block(self, key, size: int):
        pool = self.pools.get(key, [])
        i = bisect.bisect_left(pool, (size,))
        if i >= len(pool):
            return None

        def expandable_size(b):
            return b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)

        while i + 1 < len(pool) and expandable_size(pool[i + 1][3]) < expandable_size(pool[i][3]):
            i += 1
        return pool.pop(i)[3]

    def _find_expandable_block(self, key, size: int) -> Block:
        """The lowest-address unmapped block (with its free predecessor) that has room for `size`."""
        b = self._head(key)
        while b is not None:
            if not b.mapped:
                start = b.prev if b.prev is not None and b.prev.free else b
                room, c = 0, start
                while c is not None and c.free and room < size:
                    room, c = room + c.size, c.next
                if room >= size:
                    return start
            b = b.next
        raise MemoryError("expandable segments: the virtual range is exhausted")

    def _allocate_expandable(self, key, size: int) -> Block:
        c = self._find_expandable_block(key, size)
        if not c.mapped:
            c = self._map(c, min(c.size, size))
        while c.size < size:  # free (mapped) → unmapped: map the rest and merge
            c = self._map(c.next, min(size - c.size, c.next.size))
        self._remove(c)
        return c

    def malloc(self, nbytes: int, stream: str = "compute") -> Block:
        size = round_size(nbytes)
        key = (stream, size <= SMALL_SIZE)
        self._head(key)
        b = self._get_free_block(key, size)
        if b is None:
            b = self._allocate_expandable(key, size)
        if b.size - size >= MIN_BLOCK:  # should_split under expandable segments
            rest = Block(b.size - size, b.ptr + size, key, mapped=True)
            ar.splice_after(b, rest)
            b.size = size
            self._insert(rest)
        return self._hand_out(b)

    def release_cached_blocks(self) -> None:
        """Every free block unmaps the pages wholly inside it (release_blocks → unmap_block)."""
        self.releases += 1
        for key, pool in list(self.pools.items()):
            page = self._page(key)
            for _, _, _, b in list(pool):
                lo = page * ((b.ptr + page - 1) // page)
                hi = page * ((b.ptr + b.size) // page)
                if hi <= lo:
                    continue
                self._remove(b)
                if lo > b.ptr:  # the partial page before stays mapped and free
                    head = Block(lo - b.ptr, b.ptr, key, mapped=True)
                    if b.prev is not None:
                        b.prev.next = head
                    elif self.heads.get(key) is b:
                        self.heads[key] = head
                    head.prev, head.next, b.prev = b.prev, b, head
                    b.ptr, b.size = lo, b.size - (lo - b.ptr)
                    self._insert(head)
                if b.ptr + b.size > hi:  # and the partial page after
                    tail = Block(b.ptr + b.size - hi, hi, key, mapped=True)
                    ar.splice_after(b, tail)
                    b.size = hi - b.ptr
                    self._insert(tail)
                b.mapped = False
                self.reserved -= b.size
                self._merge(b, b.prev)
                self._merge(b, b.next)

"""PyTorch's CUDA caching allocator, replayed: what a sequence of allocations and frees would *reserve*.

The fake-tensor harnesses (fsdp2_mem.py, pp_mem.py) see what PyTorch allocates, tensor by tensor, in order; a GPU's
`max_memory_reserved` (what torchtitan's tables print) also holds the segments the caching allocator keeps cached
around them. This module places the same allocations by the allocator's own rules and reports the segments it would
have reserved. Rules (c10/cuda/CUDACachingAllocator.cpp, torch 2.x, default configuration):
  * round_size: requests round up to 512 B (kMinBlockSize);
  * requests up to 1 MiB (kSmallSize) come from the small pool, larger ones from the large pool;
  * get_free_block: the smallest cached free block of the pool at least as large as the request (best fit; with the
    default max_split_size every block may be split);
  * alloc_block: without one, a new segment of get_allocation_size(size): 2 MiB (kSmallBuffer) for a small request,
    20 MiB (kLargeBuffer) for one under 10 MiB (kMinLargeAlloc), else the request rounded up to 2 MiB (kRoundLarge);
  * should_split: a block is split when what remains is at least 512 B (small pool) or more than 1 MiB (large pool);
    the remainder stays in the pool as a free block of the same segment;
  * free_block: a freed block merges with free neighbours of its segment (try_merge_blocks);
  * on a failed cudaMalloc (the reserve would pass `capacity`): release_cached_blocks returns every wholly free
    segment to the device and the allocation is retried (the runs compared here never failed).
Streams: a block belongs to the stream it was allocated on and only that stream's requests reuse it (the pools are
keyed by stream). Fake tensors carry no stream; the harness records the stream FSDP entered when it allocated
(fsdp2_mem.py StreamScope: the all-gather buffers, the reduce-scatter output) by an ("s", key, stream) event;
everything else is the compute stream. `replay(..., expandable=True)` places them by the rules of expandable segments
instead (allocator_expandable.py), as torchtitan's launcher sets them.
"""
import bisect
import itertools

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
SMALL_BUFFER = 2 << 20
LARGE_BUFFER = 20 << 20
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20


def round_size(size: int) -> int:
    return MIN_BLOCK if size < MIN_BLOCK else MIN_BLOCK * ((size + MIN_BLOCK - 1) // MIN_BLOCK)


def allocation_size(size: int) -> int:
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * ((size + ROUND_LARGE - 1) // ROUND_LARGE)


class Block:
    __slots__ = ("size", "ptr", "segment", "prev", "next", "free", "pool")

    def __init__(self, size, ptr, segment, pool):
        self.size, self.ptr, self.segment, self.pool = size, ptr, segment, pool
        self.prev = self.next = None
        self.free = True


def splice_after(b: Block, new: Block) -> None:
    """Links `new` into b's segment right after b."""
    new.prev, new.next = b, b.next
    if b.next is not None:
        b.next.prev = new
    b.next = new


class FreeBlockIndex:
    """What both allocators keep alike: the free blocks of each (stream, small?) pool ordered by size then address
    (pool.blocks, BlockComparatorSize), and the reserved/allocated counters with their maxima."""

    def __init__(self, capacity: int = 0):
        self.capacity = capacity  # bytes the allocator may reserve; 0 = unlimited
        self.pools = {}  # (stream, small?) -> sorted (size, ptr, id, block) of free blocks
        self.reserved = self.allocated = 0
        self.max_reserved = self.max_allocated = 0
        self.cuda_mallocs = self.releases = 0

    def reset_peaks(self) -> None:
        """torch.cuda.reset_peak_memory_stats: the maxima restart from what is reserved and allocated now."""
        self.max_reserved, self.max_allocated = self.reserved, self.allocated

    def _insert(self, b) -> None:
        bisect.insort(self.pools.setdefault(b.pool, []), (b.size, b.ptr, id(b), b))

    def _remove(self, b) -> None:
        pool = self.pools[b.pool]
        i = bisect.bisect_left(pool, (b.size, b.ptr, id(b)))
        assert pool[i][3] is b
        del pool[i]

    def _hand_out(self, b):
        """alloc_found_block's accounting: the block (as split) is allocated."""
        b.free = False
        self.allocated += b.size
        self.max_allocated = max(self.max_allocated, self.allocated)
        return b

    # try_merge_blocks, with what differs between the two allocators as hooks: which neighbours may merge, whether a
    # free block is in the index, and who learns that a pool's first block changed.
    def _mergeable(self, dst, src) -> bool:
        return src is not None and src.free

    def _indexed(self, b) -> bool:
        return True

    def _first_block_is(self, b, old) -> None:
        pass

    def _merge(self, dst, src) -> None:
        """A free neighbour joins dst (dst is not in the free index)."""
        if not self._mergeable(dst, src):
            return
        if self._indexed(src):
            self._remove(src)
        if src is dst.prev:  # into the earlier block's address
            dst.ptr, dst.prev = src.ptr, src.prev
            if dst.prev is not None:
                dst.prev.next = dst
            else:
                self._first_block_is(dst, src)
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size

    def free(self, b) -> None:
        """free_block: the block merges with its free neighbours and returns to the pool's index."""
        b.free = True
        self.allocated -= b.size
        self._merge(b, b.prev)
        self._merge(b, b.next)
        self._insert(b)


class CachingAllocator(FreeBlockIndex):
    def __init__(self, capacity: int = 0):
        super().__init__(capacity)
        self.segments = {}  # segment id -> its size
        self._ids = itertools.count()
        self._next_ptr = 0

    def _new_segment(self, size: int, pool) -> Block:
        seg_size = allocation_size(size)
        if self.capacity and self.reserved + seg_size > self.capacity:
            self._release_cached_blocks()
        seg = next(self._ids)
        self.segments[seg] = seg_size
        self.reserved += seg_size
        self.max_reserved = max(self.max_reserved, self.reserved)
        self.cuda_mallocs += 1
        b = Block(seg_size, self._next_ptr, seg, pool)
        self._next_ptr += seg_size
        return b

    def _release_cached_blocks(self) -> None:
        for key in list(self.pools):
            keep = []
            for entry in self.pools[key]:
                b = entry[3]
                if b.prev is None and b.next is None:  # the whole segment is free
                    self.reserved -= self.segments.pop(b.segment)
                    self.releases += 1
                else:
                    keep.append(entry)
            self.pools[key] = keep

    def malloc(self, nbytes: int, stream: str = "compute") -> Block:
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        key = (stream, small)
        pool = self.pools.setdefault(key, [])
        i = bisect.bisect_left(pool, (size,))
        if i < len(pool):
            b = pool.pop(i)[3]
        else:
            b = self._new_segment(size, key)
        remaining = b.size - size
        if (small and remaining >= MIN_BLOCK) or (not small and remaining > SMALL_SIZE):
            splice_after(b, Block(remaining, b.ptr + size, b.segment, key))
            b.size = size
            self._insert(b.next)
        return self._hand_out(b)


def replay_events(events, allocator, reset_at: int = 0):
    """Play events ("a", key, bytes), ("f", key) and ("s", key, stream) (the allocation `key` was on that stream), in
    program order, through allocators made by `allocator()`; an allocation's key is its index in `events`. Yields (i,
    event, the allocator) after each event. At event `reset_at` (the reported step's start) a fresh allocator takes
    what is live, placed in allocation order, and its peaks restart (torchtitan resets them between logged steps): the
    first step's segments are not carried over, since under fake tensors its optimizer initialisation makes full-size
    temporaries a GPU run does not (fsdp2_mem.py: why step 2 is reported)."""
    alloc = allocator()
    stream_of = {ev[1]: ev[2] for ev in events if ev[0] == "s"}
    live = {}
    for i, ev in enumerate(events):
        if i == reset_at and i > 0:
            sizes = {key: b.size for key, b in live.items()}
            streams = {key: b.pool[0] for key, b in live.items()}
            alloc = allocator()
            live = {key: alloc.malloc(sizes[key], streams[key]) for key in sorted(sizes)}
            alloc.reset_peaks()
        if ev[0] == "a":
            live[ev[1]] = alloc.malloc(ev[2], stream_of.get(ev[1], "compute"))
        elif ev[0] == "f":
            b = live.pop(ev[1], None)
            if b is not None:
                alloc.free(b)
        yield i, ev, alloc


def replay(events, capacity: int = 0, reset_at: int = 0, expandable: bool = False) -> dict:
    """What the allocator would reserve for `events` (replay_events), the peaks from event `reset_at`. `expandable`: the
    allocator under expandable_segments:True (allocator_expandable.py)."""
    if expandable:
        from allocator_expandable import ExpandableAllocator as Allocator
    else:
        Allocator = CachingAllocator
    alloc = None
    for _, _, alloc in replay_events(events, lambda: Allocator(capacity), reset_at):
        pass
    if alloc is None:
        alloc = Allocator(capacity)
    streams = {ev[2] for ev in events if ev[0] == "s"}
    return {"max_reserved": alloc.max_reserved, "max_allocated": alloc.max_allocated,
            "reserved_at_end": alloc.reserved, "cuda_mallocs": alloc.cuda_mallocs, "segment_releases": alloc.releases,
            "side_stream_allocations": sum(1 for ev in events if ev[0] == "s"), "streams": sorted(streams),
            "events": len(events)}

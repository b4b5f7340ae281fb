#!/usr/bin/env python3
"""Where a replayed reserve goes: the caching allocator's state at its maximum reserve, pool by pool.

  .venv-torch/bin/python bench/torch/fsdp2_mem.py ... --alloc-replay --alloc-trace /tmp/t.pkl
  .venv-torch/bin/python bench/torch/allocator_holes.py /tmp/t.pkl [--expandable]

Replays the events (allocator_replay.replay's rules, from the reported step's start) and, at the event where the
reserve peaks, prints per (stream, pool): what is reserved, what is allocated, and the cached free blocks by size
(the holes the reserve holds beyond the allocations), with the request that made the peak.
"""
import argparse
import collections
import pickle
import sys

import allocator_replay as ar

GiB, MiB = 2**30, 2**20


def pool_state(alloc, expandable: bool):
    """(stream, small?) -> [reserved, allocated, free block sizes]."""
    state = collections.defaultdict(lambda: [0, 0, []])
    if expandable:
        for key, head in alloc.heads.items():
            b = head
            while b is not None:
                if b.mapped:
                    state[key][0] += b.size
                    if b.free:
                        state[key][2].append(b.size)
                    else:
                        state[key][1] += b.size
                b = b.next
    else:
        for key, pool in alloc.pools.items():
            state[key][2].extend(entry[0] for entry in pool)
        for seg, key in alloc.seg_pool.items():
            if seg in alloc.segments:
                state[key][0] += alloc.segments[seg]
        for key, st in state.items():
            st[1] = st[0] - sum(st[2])
    return state


class TracingAllocator(ar.CachingAllocator):
    """The default allocator, remembering which pool each segment serves."""

    def __init__(self, capacity=0):
        super().__init__(capacity)
        self.seg_pool = {}

    def _new_segment(self, size, pool):
        b = super()._new_segment(size, pool)
        self.seg_pool[b.segment] = pool
        return b


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--expandable", action="store_true", help="replay under expandable_segments:True")
    ap.add_argument("--sizes", type=int, default=0, help="also list the N most common free block sizes")
    ap.add_argument("--stream", help="show the moment this stream's large pool reserves most (default: the total's)")
    args = ap.parse_args()
    with open(args.trace, "rb") as f:
        d = pickle.load(f)
    events, reset_at = d["events"], d["reset_at"]
    if args.expandable:
        from allocator_expandable import ExpandableAllocator as Allocator
    else:
        Allocator = TracingAllocator
    best, at, top, reserved = None, None, -1, 0
    for i, ev, alloc in ar.replay_events(events, Allocator, reset_at):
        changed, reserved = alloc.reserved != reserved, alloc.reserved
        if i < reset_at or (best is not None and not changed):
            continue
        state = pool_state(alloc, args.expandable)
        now = state[(args.stream, False)][0] if args.stream else alloc.reserved
        if now > top:
            best, at, top = state, (i, ev), now
    what = f"allocation of {at[1][2] / MiB:.1f} MiB" if at[1][0] == "a" else "free"
    print(f"max reserved {alloc.max_reserved / GiB:.2f} GiB; shown: event {at[0]} of {len(events)} ({what})")
    for key, (reserved, allocated, free) in sorted(best.items(), key=lambda kv: -kv[1][0]):
        hist = collections.Counter()
        for size in free:
            hist[1 << max(0, (size - 1).bit_length() - 20)] += size  # by power-of-two MiB bucket
        print(f"  {key[0]:>14s} {'small' if key[1] else 'large'}: reserved {reserved / GiB:6.2f} GiB, allocated "
              f"{allocated / GiB:6.2f}, cached free {sum(free) / GiB:5.2f} in {len(free)} blocks")
        for bucket in sorted(hist):
            print(f"      ≤ {bucket:6d} MiB: {hist[bucket] / GiB:5.2f} GiB")
        if args.sizes:
            common = collections.Counter(round(size / MiB, 1) for size in free).most_common(args.sizes)
            print("      most common free sizes (MiB × count): " + ", ".join(f"{m:g} × {n}" for m, n in common))
    return 0


if __name__ == "__main__":
    sys.exit(main())

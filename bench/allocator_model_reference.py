#!/usr/bin/env python3
"""A plain-Python model of PyTorch's CUDA caching allocator: the peer of the C++ replay.

Standard library only, written in the obvious way, for the default settings
(no max_split_size, no roundup_power2_divisions, no expandable segments, no
memory fraction or capacity limit).  The rules, as in
``/work/shared/spec/allocator-policy.md`` and ``src/allocator/caching_allocator.cc``:

- round: below 512 B -> 512 B, else up to a multiple of 512 B;
- pool: rounded size <= 1 MiB -> small pool, else large pool;
- best fit: each pool keeps its free blocks in a list sorted by
  (stream, size, address) (``bisect``); take the first block of the stream with
  size >= request (lowest address on ties);
- none fits -> cudaMalloc a new segment: <= 1 MiB -> 2 MiB, < 10 MiB -> 20 MiB,
  else the size rounded up to 2 MiB; new segments take increasing addresses
  (2 MiB aligned), as the C++ model's synthetic address space does when nothing
  is ever released;
- split: small pool if the remainder is >= 512 B; large pool if the remainder is
  > 1 MiB; the allocation keeps the low address, the remainder becomes free;
- free_requested: the block stops counting as allocated; free_completed: it
  merges with its free neighbours (previous, then next; the lower address
  stays) and goes back to the free list.  Segments are never released.

It replays the request stream that ``replay_bench --dump FILE`` writes (format:
see ``read_dump``) exactly as ``allocator::Replay`` does in what-if mode, and
reports events per second plus the peak reserved / allocated bytes, which must
equal the C++ model's.

Usage:
    python3 bench/allocator_model_reference.py DUMP [--repeat K] [--json]
        [--expect-peak-reserved B --expect-peak-allocated B]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from array import array
from bisect import bisect_left, insort

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
SMALL_BUFFER = 2 << 20
MIN_LARGE_ALLOC = 10 << 20
LARGE_BUFFER = 20 << 20
ROUND_LARGE = 2 << 20

FREE, ALLOCATED, PENDING_FREE = 0, 1, 2
ALLOC, FREE_REQUESTED, FREE_COMPLETED = 0, 1, 2  # action codes of the dump


class Block:
    __slots__ = ("addr", "size", "requested", "stream", "pool", "prev", "next", "state")

    def __init__(self, addr, size, stream, pool, prev=None, nxt=None):
        self.addr = addr
        self.size = size
        self.requested = 0
        self.stream = stream
        self.pool = pool  # 0 small, 1 large
        self.prev = prev
        self.next = nxt
        self.state = FREE


class CachingAllocatorModel:
    def __init__(self, address_base: int = 1 << 44):
        # Free blocks per pool: sorted (stream, size, addr, block); addresses are unique, so the
        # block itself is never compared.
        self.free = ([], [])
        self.next_addr = address_base
        self.allocated = 0
        self.reserved = 0
        self.peak_allocated = 0
        self.peak_reserved = 0
        self.segments = 0

    def malloc(self, requested: int, stream: int) -> Block:
        size = MIN_BLOCK if requested < MIN_BLOCK else (requested + MIN_BLOCK - 1) // MIN_BLOCK * MIN_BLOCK
        pool = 0 if size <= SMALL_SIZE else 1
        free = self.free[pool]
        i = bisect_left(free, (stream, size))
        if i < len(free) and free[i][0] == stream:
            block = free.pop(i)[3]
        else:  # cudaMalloc
            if size <= SMALL_SIZE:
                seg = SMALL_BUFFER
            elif size < MIN_LARGE_ALLOC:
                seg = LARGE_BUFFER
            else:
                seg = (size + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE
            block = Block(self.next_addr, seg, stream, pool)
            self.next_addr += (seg + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE
            self.reserved += seg
            if self.reserved > self.peak_reserved:
                self.peak_reserved = self.reserved
            self.segments += 1
        remaining = block.size - size
        if (remaining >= MIN_BLOCK) if pool == 0 else (remaining > SMALL_SIZE):
            rest = Block(block.addr + size, remaining, stream, pool, block, block.next)
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            insort(free, (stream, remaining, rest.addr, rest))
        block.state = ALLOCATED
        block.requested = requested
        self.allocated += block.size
        if self.allocated > self.peak_allocated:
            self.peak_allocated = self.allocated
        return block

    def free_requested(self, block: Block) -> None:
        block.state = PENDING_FREE
        self.allocated -= block.size

    def free_completed(self, block: Block) -> None:
        block.state = FREE
        free = self.free[block.pool]
        prev, nxt = block.prev, block.next
        if prev is not None and prev.state == FREE:
            del free[bisect_left(free, (prev.stream, prev.size, prev.addr))]
            block.addr = prev.addr
            block.prev = prev.prev
            if prev.prev is not None:
                prev.prev.next = block
            block.size += prev.size
        if nxt is not None and nxt.state == FREE:
            del free[bisect_left(free, (nxt.stream, nxt.size, nxt.addr))]
            block.next = nxt.next
            if nxt.next is not None:
                nxt.next.prev = block
            block.size += nxt.size
        insort(free, (block.stream, block.size, block.addr, block))

    def free_block_count(self) -> int:
        return len(self.free[0]) + len(self.free[1])


def read_dump(path: str):
    """``replay_bench --dump`` format, little-endian: b"VSREPLY1", u64 events n, u64 allocations,
    then n x u8 action (0 alloc, 1 free_requested, 2 free_completed), n x u64 requested size,
    n x u64 stream, n x i32 allocation index."""
    with open(path, "rb") as f:
        if f.read(8) != b"VSREPLY1":
            sys.exit(f"error: {path} is not a replay_bench dump")
        header = array("Q")
        header.fromfile(f, 2)
        if sys.byteorder != "little":
            header.byteswap()
        n, allocations = header
        columns = []
        for code in ("B", "Q", "Q", "i"):
            col = array(code)
            if code == "i" and col.itemsize != 4:
                sys.exit("error: this Python's array('i') is not 32-bit")
            col.fromfile(f, n)
            if sys.byteorder != "little":
                col.byteswap()
            columns.append(col)
    actions, sizes, streams, owners = columns
    return n, allocations, actions, sizes, streams, owners


def replay(n, allocations, actions, sizes, streams, owners):
    """What allocator::Replay does with each event in what-if mode."""
    model = CachingAllocatorModel()
    block_of = [None] * allocations
    malloc = model.malloc
    free_requested = model.free_requested
    free_completed = model.free_completed
    t0 = time.perf_counter()
    for action, size, stream, owner in zip(actions, sizes, streams, owners):
        if action == ALLOC:
            block_of[owner] = malloc(size, stream)
        elif action == FREE_REQUESTED:
            block = block_of[owner]
            if block is not None and block.state == ALLOCATED:
                free_requested(block)
        elif action == FREE_COMPLETED:
            block = block_of[owner]
            if block is None:
                continue
            if block.state == ALLOCATED:
                free_requested(block)
            if block.state == PENDING_FREE:
                free_completed(block)
            block_of[owner] = None
    seconds = time.perf_counter() - t0
    return model, seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Replay a replay_bench dump through a plain-Python allocator model.")
    ap.add_argument("dump", help="file written by replay_bench --dump")
    ap.add_argument("--repeat", type=int, default=1, help="replays, the best time counts (default 1)")
    ap.add_argument("--json", action="store_true", help="print the results as one JSON line")
    ap.add_argument("--expect-peak-reserved", type=int, help="check the peak reserved bytes against this")
    ap.add_argument("--expect-peak-allocated", type=int, help="check the peak allocated bytes against this")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")

    n, allocations, actions, sizes, streams, owners = read_dump(args.dump)
    best = None
    model = None
    for _ in range(args.repeat):
        model, seconds = replay(n, allocations, actions, sizes, streams, owners)
        best = seconds if best is None else min(best, seconds)
    result = {
        "events": n,
        "seconds": best,
        "events_per_s": n / best if best > 0 else None,
        "ns_per_event": best * 1e9 / n if n else None,
        "peak_reserved": model.peak_reserved,
        "peak_allocated": model.peak_allocated,
        "segments": model.segments,
        "end_free_blocks": model.free_block_count(),
    }
    ok = True
    if args.json:
        print(json.dumps(result))
    else:
        print(f"python model: {n:,} events in {best:.3f} s (best of {args.repeat}): "
              f"{result['events_per_s'] / 1e6:.2f} M events/s, {result['ns_per_event']:.0f} ns/event")
        print(f"  peak reserved {model.peak_reserved} B, peak allocated {model.peak_allocated} B, "
              f"segments {model.segments}, free blocks at the end {model.free_block_count()}")
    for name, expected, got in (("peak reserved", args.expect_peak_reserved, model.peak_reserved),
                                ("peak allocated", args.expect_peak_allocated, model.peak_allocated)):
        if expected is not None:
            same = expected == got
            ok = ok and same
            print(f"  check {name}: expected {expected}, python {got}: {'equal' if same else 'DIFFERENT'}",
                  file=sys.stderr if args.json else sys.stdout)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

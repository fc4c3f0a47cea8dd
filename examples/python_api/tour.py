"""A tour of vramscope's Python API on the built-in example (a real H200 snapshot), a prediction,
a what-if and an out-of-memory message: docs/guide/python.md shows its output. Typed: it passes
``mypy --strict``."""

from __future__ import annotations

import vramscope

MIB = 1 << 20

# Where the memory of a step went: the peaks, and the bytes by category at the peak.
report = vramscope.report()  # no path: the built-in example
device = report.device()
print(f"peak allocated {device.peak_allocated.bytes:,} B in step {device.peak_step} "
      f"({device.peak_phase}), peak reserved {device.peak_reserved.bytes:,} B")
for share in device.categories_at_peak.values():
    if share.bytes:
        print(f"  {share.category:<16} {share.bytes / MIB:8.2f} MiB in {share.count} allocations")
largest = report.owners_at_peak()[0]
print(f"largest owner: {largest.owner} ({largest.category}, {largest.bytes / MIB:.2f} MiB)")
for step in device.iterations:
    print(f"step {step.step}: peak {step.peak_allocated / MIB:.2f} MiB in {step.peak_phase}")
timeline = report.timeline()
allocations = report.allocations()
print(f"{len(timeline.allocated)} timeline points, {len(allocations)} allocations, "
      f"{sum(1 for f in allocations.free_event if f is None)} alive at the end")

# Would it fit a smaller GPU, and what does expandable_segments change?
simulation = vramscope.simulate(capacity="200MiB", compare=["", "expandable_segments:True"])
for run in simulation.devices[0].what_if:
    fate = "fits" if run.fits else f"runs out at event {run.out_of_memory_event}"
    print(f"what if 200 MiB, {run.alloc_conf or 'defaults'}: {fate}")

# Before renting the GPU: GPT-2 small, batch 8 x 512, bf16 weights, AdamW.
prediction = vramscope.predict("gpt2", batch=8, seq=512, dtype="bf16", database=False)
print(f"predicted peak for gpt2: {prediction.device().peak_allocated.bytes / MIB:,.0f} MiB")

# What an out-of-memory message means.
message = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
           "total capacity of 79.15 GiB of which 1.50 GiB is free. Process 1234 has 77.64 GiB "
           "memory in use. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 5.00 "
           "GiB is reserved by PyTorch but unallocated.")
explained = vramscope.explain(message).messages[0]
print(f"cause: {explained.cause}; {explained.verdict}")

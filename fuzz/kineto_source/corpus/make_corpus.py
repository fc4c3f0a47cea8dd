#!/usr/bin/env python3
"""Writes the seed corpus for kineto_source_fuzzer.

Every seed is a small, made-up trace in the shape torch.profiler's export_chrome_trace() writes
(nothing here comes from a real recording): the modern [memory] schema with Addr and totals, the
torch 1.9 schema with Bytes only, ROCm's Device Type 6, the Chrome array form, nested operator
and Python events, profiler steps, a reserved change, two devices.

Usage: python3 make_corpus.py [output_dir]   (default: the directory of this script)
The output is deterministic; re-running it rewrites the same files.
"""

import json
import os
import sys


def mem(ts, nbytes, addr=None, allocated=None, reserved=None, device=0, dtype=1, tid=1):
    args = {"Device Type": dtype, "Device Id": device if dtype else -1, "Bytes": nbytes}
    if addr is not None:
        args["Addr"] = addr
    if allocated is not None:
        args["Total Allocated"] = allocated
    if reserved is not None:
        args["Total Reserved"] = reserved
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1,
            "tid": tid, "ts": ts, "args": args}


def span(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


SEEDS = {
    "modern": {"schemaVersion": 1, "traceEvents": [
        mem(1, 512, 0x7F00, 1536, 2097152), mem(2, -512, 0x7F00, 1024, 2097152),
        mem(3, 8, 0x10, 8, 0, dtype=0)]},
    "legacy": {"schemaVersion": 1, "traceEvents": [
        mem(1, 512), mem(2, 512), mem(3, -512), mem(4, -1024), mem(5, 16, dtype=0)]},
    "rocm": {"traceEvents": [dict(mem(1.25, 4608, 0x7F00, 4608, 2097152, dtype=6),
                                  args=dict(mem(1.25, 4608, 0x7F00, 4608, 2097152,
                                                dtype=6)["args"], finished=True))]},
    "array": [mem(1, 512, 0x10, 512, 0), mem(2, -512, 0x10, 0, 0)],
    "stacks": {"traceEvents": [
        span("user_annotation", "ProfilerStep#1", 0, 100),
        span("python_function", "train.py(10): main", 0.5, 99),
        span("python_function", "nn.Module: Linear_0", 1, 90),
        span("python_function", "<built-in function linear>", 2, 80),
        span("cpu_op", "aten::linear", 3, 70),
        span("cpu_op", "aten::addmm", 4, 60),
        mem(5.125, 1024, 0x20, 1024, 2097152), mem(95, -1024, 0x20, 0, 2097152)]},
    "legacy_call_stack": {"traceEvents": [
        dict(span("Operator", "aten::conv2d", 10, 50), tid="1",
             args={"Call stack": "conv.py(439): forward;train.py(54): <module>"}),
        span("Operator", "ProfilerStep#5", 0, 100),
        mem(20, 512), mem(30, -512)]},
    "reserved_and_devices": {"traceEvents": [
        mem(1, 512, 0x10, 512, 2097152), mem(2, 4194304, 0x20, 4194816, 6291456),
        mem(3, -4194304, 0x20, 512, 2097152), mem(1, 512, 0x10, 512, 2097152, device=1)]},
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for name, doc in SEEDS.items():
        with open(os.path.join(out, f"{name}.json"), "w") as f:
            json.dump(doc, f, separators=(",", ":"))


if __name__ == "__main__":
    main()

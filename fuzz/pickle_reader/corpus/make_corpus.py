#!/usr/bin/env python3
"""Writes the seed corpus for pickle_reader_fuzzer.

Every seed is a small, made-up, snapshot-like object (nothing here comes from a real recording),
pickled with the stdlib in the protocols PyTorch uses for memory snapshots (2, 4 and 5), plus one
protocol-0 "re-save" so the fuzzer starts from the text opcodes too. Only plain data is pickled:
dict, list, tuple, str, int, float, bool and None (and, in the "misc" seeds, bytes, bytearray, set
and frozenset, which protocols 4 and 5 write without any GLOBAL). The script checks that no seed
contains an opcode the reader refuses.

Usage: python3 make_corpus.py [output_dir]   (default: the directory of this script)
The output is deterministic; re-running it rewrites the same files.
"""

import io
import os
import pickle
import pickletools
import sys

MAX_SEED_BYTES = 4096

REFUSED = {
    "GLOBAL", "STACK_GLOBAL", "REDUCE", "BUILD", "INST", "OBJ", "NEWOBJ", "NEWOBJ_EX", "PERSID",
    "BINPERSID", "EXT1", "EXT2", "EXT4", "NEXT_BUFFER", "READONLY_BUFFER",
}


def frames_python():
    return [
        {"filename": "/home/user/project/train.py", "line": 42, "name": "forward"},
        {"filename": "/home/user/project/train.py", "line": 97, "name": "train_step"},
        {"filename": "/usr/lib/python3.11/runpy.py", "line": 86, "name": "_run_code"},
    ]


def frames_mixed():
    return [
        {"filename": "??", "line": 0, "name": "torch::unwind::unwind()"},
        {"filename": "/opt/torch/lib/libc10_cuda.so", "line": 0, "name": "c10::cuda::malloc"},
        {"filename": "D:\\Dev\\proj\\model.py", "line": 7, "name": "<module>"},
    ]


def modern_snapshot():
    """A 2.1+ schema snapshot: blocks with frames, trace entries sharing one frames list."""
    fp = frames_python()
    fm = frames_mixed()
    base = 0x7F3A00000000
    blocks = [
        {"address": base, "size": 1024, "requested_size": 1000, "state": "active_allocated",
         "frames": fp},
        {"address": base + 1024, "size": 512, "requested_size": 500,
         "state": "active_pending_free", "frames": fm},
        {"address": base + 1536, "size": 2095616, "requested_size": 0, "state": "inactive",
         "frames": []},
    ]
    segment = {
        "device": 0, "address": base, "total_size": 2097152, "allocated_size": 1024,
        "active_size": 1536, "requested_size": 1500, "stream": 0, "segment_type": "small",
        "segment_pool_id": (0, 0), "is_expandable": False, "frames": fp, "blocks": blocks,
    }
    trace = [
        {"action": "segment_alloc", "addr": base, "size": 2097152, "stream": 0,
         "time_us": 1700000000000000, "frames": fm},
        {"action": "alloc", "addr": base, "size": 1000, "stream": 0,
         "time_us": 1700000000000100, "frames": fp},
        {"action": "alloc", "addr": base + 1024, "size": 500, "stream": 0,
         "time_us": 1700000000000200, "frames": fp},
        {"action": "free_requested", "addr": base + 1024, "size": 500, "stream": 0,
         "time_us": 1700000000000300, "frames": fm},
    ]
    return {
        "segments": [segment],
        "device_traces": [trace, []],
        "allocator_settings": {
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False",
            "max_split_size": -1,
            "garbage_collection_threshold": 0.0,
            "expandable_segments": False,
            "roundup_power2_divisions": {"1": 1, "2": 2, "4": 4},
            "release_lock_on_cudamalloc": False,
        },
        "external_annotations": [{"device": 0, "time_us": 1700000000000050, "stage": "fwd"}],
    }


def legacy_snapshot():
    """PyTorch 2.0 / 1.13 schema: blocks carry a `history` list instead of an address."""
    fp = frames_python()
    blocks = [
        {"size": 4096, "state": "active_allocated",
         "history": [{"addr": 0x7F0000000000, "real_size": 4000, "frames": fp}]},
        {"size": 8192, "state": "inactive", "history": []},
    ]
    return {
        "segments": [{"device": 0, "address": 0x7F0000000000, "total_size": 12288,
                      "allocated_size": 4096, "active_size": 4096, "stream": 0,
                      "segment_type": "large", "blocks": blocks}],
        "device_traces": [[{"action": "snapshot", "addr": 0, "size": 4096, "stream": 0}]],
    }


def bare_segment_list():
    """`torch.cuda.memory_snapshot()` in old releases: a bare list of segments."""
    return [
        {"device": 1, "address": 0x7E0000000000 + i * 0x200000, "total_size": 2097152,
         "allocated_size": 0, "active_size": 0, "stream": 0, "segment_type": "large",
         "blocks": [{"size": 2097152, "state": "inactive"}]}
        for i in range(3)
    ]


def oom_snapshot():
    """An OOM trace: `device_free` instead of `addr`, integers at the edges of 64 bits."""
    return {
        "segments": [],
        "device_traces": [[
            {"action": "oom", "device_free": 123456, "size": 2**34, "stream": 7,
             "time_us": 1700000000000000},
            {"action": "user_defined", "addr": 2**64 - 1, "size": -(2**63), "stream": 2**63 - 1,
             "time_us": -1, "user_metadata": "", "compile_context": "N/A"},
            {"action": "segment_map", "addr": 2**60, "size": -(2**60) - 1, "stream": 2**70},
        ]],
        "allocator_settings": {"garbage_collection_threshold": 0.8, "expandable_segments": True,
                               "max_split_size": 2**62},
    }


def shared_frames_snapshot():
    """Many trace entries referring to the same two stacks (memo-heavy, like real snapshots)."""
    stacks = [frames_python(), frames_mixed()]
    entries = []
    for i in range(24):
        entries.append({"action": ("alloc", "free_requested", "free_completed")[i % 3],
                        "addr": 0x7F0000000000 + 512 * (i // 3), "size": 512, "stream": 0,
                        "frames": stacks[i % 2]})
    return {"segments": [], "device_traces": [entries]}


def regions_snapshot():
    """What memory by region reads (issue 16): compile_context and user_metadata on every entry,
    nested and unmatched external_annotations ranges, an annotate entry labelling a live tensor,
    and FX frames of generated code (augment_with_fx_traces=True), one with a damaged field."""
    fx = [{"filename": "/tmp/torchinductor_u/ab/cabc.py", "line": 40, "name": "call",
           "fx_node_op": "call_function", "fx_node_name": "addmm",
           "fx_node_target": "aten.addmm.default",
           "fx_original_trace": '  File "/proj/model.py", line 20, in forward\n    a = self.l(x)\n'},
          {"filename": "/proj/train.py", "line": 12, "name": "step"}]
    damaged = [{"filename": "/tmp/torchinductor_u/ab/cabc.py", "line": 41, "name": "call",
                "fx_node_name": 3, "fx_original_trace": "File"}]
    base = 0x7F0000000000

    def entry(action, addr, size, t, cc, frames, meta=""):
        return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t,
                "compile_context": cc, "user_metadata": meta, "frames": frames}

    region = "Torch-Compiled Region: 0/0"
    trace = [
        entry("segment_alloc", base, 2 << 20, 100, "N/A", fx),
        entry("alloc", base, 4096, 110, region, fx, "step=1"),
        entry("annotate", base, 0, 115, region, [], "saved for backward"),
        entry("alloc", base + 4096, 512, 120, region, damaged),
        entry("free_requested", base, 4096, 130, "N/A", fx),
        entry("free_completed", base, 4096, 130, "N/A", fx),
    ]
    annotations = [
        {"stage": "START", "name": "forward", "device": 0, "time_us": 105},
        {"stage": "START", "name": "inner", "device": 0, "time_us": 108},
        {"stage": "END", "name": "inner", "device": 0, "time_us": 125},
        {"stage": "END", "name": "never started", "device": 0, "time_us": 126},
        {"stage": "START", "name": "never ended", "device": 0, "time_us": 127},
        {"stage": "MIDDLE", "device": 0, "time_us": 128},
    ]
    segment = {"device": 0, "address": base, "total_size": 2 << 20, "allocated_size": 512,
               "active_size": 512, "requested_size": 512, "stream": 0, "segment_type": "large",
               "blocks": [{"address": base, "size": 4096, "requested_size": 0,
                           "state": "inactive", "frames": []},
                          {"address": base + 4096, "size": 512, "requested_size": 512,
                           "state": "active_allocated", "frames": damaged},
                          {"address": base + 4608, "size": (2 << 20) - 4608,
                           "requested_size": 0, "state": "inactive", "frames": []}]}
    return {"segments": [segment], "device_traces": [trace],
            "external_annotations": annotations}


def long_list():
    """Over 1000 items: pickle writes the list in batches (several APPENDS)."""
    return {"segments": [], "device_traces": [list(range(1100))]}


def self_referential():
    """A list that contains itself (only possible through the memo)."""
    loop = []
    loop.append(loop)
    return {"segments": loop, "device_traces": [loop, loop]}


def misc_values(protocol):
    """Values the reader must keep even though snapshots rarely hold them."""
    values = {
        "segments": [],
        "device_traces": [[]],
        "floats": [1.5, -0.0, float("inf"), float("-inf"), float("nan"), 1e-310],
        "text": ["", "é", "€", "\U0001F600", "tab\there", "new\nline", "back\\slash"],
        "bytes": b"\x00\xff raw",
        "set": {1, 2, 3},
        "frozenset": frozenset({"a"}),
        "tuples": [(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)],
        "none": None,
        "bools": [True, False],
    }
    if protocol >= 5:
        values["bytearray"] = bytearray(b"abc")  # BYTEARRAY8; protocol 4 would need REDUCE
    return values


# (name, object factory, protocols)
SEEDS = [
    ("modern", modern_snapshot, (2, 4, 5)),
    ("legacy_history", legacy_snapshot, (2, 4)),
    ("bare_segment_list", bare_segment_list, (2, 5)),
    ("oom_bigints", oom_snapshot, (2, 4, 5)),
    ("shared_frames", shared_frames_snapshot, (4, 5)),
    ("regions", regions_snapshot, (4, 5)),
    ("long_list", long_list, (2, 4)),
    ("self_referential", self_referential, (2, 4)),
    ("misc_values", misc_values, (4, 5)),
    ("resave_text", legacy_snapshot, (0,)),
]


def dumps_small_frames(obj, protocol):
    """pickle.dumps by the pure-Python pickler with 256-byte FRAMEs instead of 64 KiB ones: a
    seed-sized copy of a multi-megabyte snapshot's framing, which the reader's pre-scan splits
    at a frame to scan the halves on two threads (memo_references.h)."""
    buf = io.BytesIO()
    target = pickle._Framer._FRAME_SIZE_TARGET
    pickle._Framer._FRAME_SIZE_TARGET = 256
    try:
        pickle._Pickler(buf, protocol).dump(obj)
    finally:
        pickle._Framer._FRAME_SIZE_TARGET = target
    return buf.getvalue()


# (name, object factory, protocols), pickled in small frames
SMALL_FRAME_SEEDS = [
    ("small_frames", modern_snapshot, (4,)),
]


def check(name, data):
    if len(data) >= MAX_SEED_BYTES:
        sys.exit(f"{name}: {len(data)} bytes, seeds must stay under {MAX_SEED_BYTES}")
    for opcode, _, _ in pickletools.genops(data):
        if opcode.name in REFUSED:
            sys.exit(f"{name}: contains refused opcode {opcode.name}")


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    os.makedirs(out_dir, exist_ok=True)
    count = 0
    for name, factory, protocols in SEEDS:
        for protocol in protocols:
            obj = factory(protocol) if factory is misc_values else factory()
            data = pickle.dumps(obj, protocol=protocol)
            file_name = f"{name}_p{protocol}.pickle"
            check(file_name, data)
            with open(os.path.join(out_dir, file_name), "wb") as f:
                f.write(data)
            count += 1
    for name, factory, protocols in SMALL_FRAME_SEEDS:
        for protocol in protocols:
            data = dumps_small_frames(factory(), protocol)
            file_name = f"{name}_p{protocol}.pickle"
            check(file_name, data)
            with open(os.path.join(out_dir, file_name), "wb") as f:
                f.write(data)
            count += 1
    print(f"wrote {count} seeds to {out_dir}")


if __name__ == "__main__":
    main()

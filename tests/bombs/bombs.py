"""Hostile inputs, one of each kind the resource contract covers (docs/design/resource-contract.md),
built at run time (never committed at full size) by the bombs test suite and, scaled down, as seeds
of the fuzz targets (make_fuzz_seeds.py).

Each builder writes into a folder and returns the path of the input to hand vramscope. Standard
library only; the pickles are written with Python's own pickler from plain dicts and lists, whose
memo makes a shared object cost a few bytes per reference, exactly as a crafted file would.
"""

from __future__ import annotations

import gzip
import json
import pickle
import zlib
from pathlib import Path

MIB = 1 << 20


def _segment(address: int, blocks: list, total: int) -> dict:
    return {"device": 0, "address": address, "total_size": total, "allocated_size": total,
            "active_size": total, "requested_size": total, "stream": 0, "segment_type": "large",
            "blocks": blocks}


def shared_segments(folder: Path, fan_out: int = 10_000) -> Path:
    """A snapshot whose `segments` list holds `fan_out` references to one segment dict, whose
    `blocks` hold `fan_out` references to one block dict: fan_out^2 blocks in ~4*fan_out bytes (the
    issue's 40 KB file that made `report` read 10^8 blocks)."""
    block = {"address": 1 << 30, "size": 512, "requested_size": 512, "state": "active_allocated"}
    segment = _segment(1 << 30, [block] * fan_out, 512 * fan_out)
    path = folder / "shared_segments.pickle"
    path.write_bytes(pickle.dumps({"segments": [segment] * fan_out, "device_traces": [[]]},
                                  protocol=4))
    return path


def shared_trace_entries(folder: Path, fan_out: int = 10_000) -> Path:
    """One trace entry of `fan_out` keys referenced `fan_out` times from the device's trace."""
    entry = {f"key{i}": i for i in range(fan_out)}
    entry.update(action="alloc", addr=1 << 30, size=512, stream=0)
    path = folder / "shared_trace_entries.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [[entry] * fan_out]},
                                  protocol=4))
    return path


def zeros_gzip(folder: Path, members: int = 200, member_bytes: int = 64 * MIB) -> Path:
    """A .pickle.gz of zeros: `members` concatenated gzip members of `member_bytes` zeros each
    (gzip files may be concatenations). The default is 13 MB inflating to 12.5 GiB."""
    member = gzip.compress(bytes(member_bytes), compresslevel=9, mtime=0)
    path = folder / "zeros.pickle.gz"
    with path.open("wb") as f:
        for _ in range(members):
            f.write(member)
    return path


def _headed_gzip(path: Path, head: bytes, filler: bytes, inflated_bytes: int) -> Path:
    """A gzip of `head` followed by `filler` repeated to `inflated_bytes`, compressed as it is
    made (never whole in memory)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunks = [compressor.compress(head)]
    block = filler * (16 * MIB // len(filler))
    left = inflated_bytes
    while left > 0:
        n = min(left, len(block))
        chunks.append(compressor.compress(block[:n]))
        left -= n
    chunks.append(compressor.flush())
    path.write_bytes(b"".join(chunks))
    return path


def pickle_headed_gzip(folder: Path, inflated_bytes: int = 512 * MIB) -> Path:
    """A gzip whose content starts like a pickle (PROTO 4) and goes on with zeros: recognised from
    its first bytes, then bounded by the inflation ratio alone."""
    return _headed_gzip(folder / "pickle_headed.pickle.gz", b"\x80\x04", b"\0", inflated_bytes)


def stacked_segments(folder: Path, count: int = 1000) -> Path:
    """`count` segments all at address 0 on one device: an allocator state no GPU can have."""
    segments = [_segment(0, [{"address": 0, "size": 2 * MIB, "requested_size": 2 * MIB,
                              "state": "active_allocated"}], 2 * MIB) for _ in range(count)]
    path = folder / "stacked_segments.pickle"
    path.write_bytes(pickle.dumps({"segments": segments, "device_traces": [[]]}, protocol=4))
    return path


def trace_headed_gzip(folder: Path, inflated_bytes: int = 512 * MIB) -> Path:
    """A .json.gz whose content starts like a profiler trace and goes on with spaces: read as it
    is inflated (on a second thread), then bounded by the inflation ratio alone."""
    return _headed_gzip(folder / "trace_headed.pt.trace.json.gz", b'{"traceEvents": [', b" ",
                        inflated_bytes)


def deep_profiler_trace(folder: Path, depth: int = 1_000_000) -> Path:
    """A profiler trace whose events are nested `depth` lists deep."""
    path = folder / "deep.pt.trace.json"
    path.write_text('{"traceEvents":' + "[" * depth + "]" * depth + "}")
    return path


def deep_memory_timeline(folder: Path, depth: int = 1_000_000) -> Path:
    """A raw memory timeline of lists nested `depth` deep."""
    path = folder / "deep.raw.json"
    path.write_text("[" * depth + "]" * depth)
    return path


def deep_layers_config(folder: Path, layers: int = 3_000_000) -> Path:
    """A 130-byte Hugging Face config with millions of layers (predict grew past 7.8 GB on it)."""
    path = folder / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 64,
                                "intermediate_size": 128, "num_attention_heads": 4,
                                "num_hidden_layers": layers, "vocab_size": 1000}))
    return path


def deep_sidecar(folder: Path, snapshot: Path, depth: int = 1_000_000) -> Path:
    """A real snapshot with a capture sidecar beside it whose `phases` are lists nested `depth`
    deep. Returns the snapshot's path (the sidecar is found beside it)."""
    path = folder / "run.pickle.gz"
    path.write_bytes(snapshot.read_bytes())
    (folder / "run.sidecar.json").write_text(
        '{"format": "vramscope-capture", "version": 1, "phases": ' + "[" * depth + "]" * depth
        + "}")
    return path


def recursive_view_report(folder: Path, report: Path) -> Path:
    """A copy of a real report database whose vramscope_allocations is a VIEW of a recursive
    query without end: a few KB that would yield rows forever if read."""
    import sqlite3

    path = folder / "endless.sqlite"
    path.write_bytes(report.read_bytes())
    db = sqlite3.connect(path)
    columns = [row[1] for row in db.execute("PRAGMA table_info(vramscope_allocations)")]
    db.execute("DROP TABLE vramscope_allocations")
    select = ", ".join("x" for _ in columns)
    db.execute(f"CREATE VIEW vramscope_allocations({', '.join(columns)}) AS "
               f"WITH RECURSIVE c(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM c) "
               f"SELECT {select} FROM c")
    db.commit()
    db.execute("VACUUM")
    db.close()
    return path

"""End-to-end tests of `vramscope report` on the native trace (.vstrace) that `vramscope run
--native` records with CUPTI (docs/design/native-trace.md). The traces are written here by a
small writer of the documented layout (struct + zlib.crc32), independent of the C++ writer, so
the format document, the writer and the reader are checked against each other."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import pytest

from conftest import assert_failure, list_dir

FORMAT = "vramscope native trace (.vstrace)"
MAGIC = b"\x89VST\r\n\x1a\n"
START_REALTIME_NS = 1_700_000_000_000_000_000
START_CLOCK_NS = 5_000_000_000
MiB = 1 << 20

# Record kinds (docs/design/native-trace.md).
STRING, FRAME, STACK, ALLOC, FREE, NVTX_PUSH, NVTX_POP, END = 2, 3, 4, 5, 6, 14, 15, 19
FACT = 1


class Vstrace:
    def __init__(self, major: int = 1, minor: int = 0, pid: int = 4242, rank: int = 0):
        clock = b"cuptiGetTimestamp, ns"
        header = (MAGIC + struct.pack("<HHIIiQQH", major, minor, 42 + len(clock) + 4, pid, rank,
                                      START_REALTIME_NS, START_CLOCK_NS, len(clock)) + clock)
        self.data = bytearray(header + struct.pack("<I", zlib.crc32(header)))

    def record(self, kind: int, payload: bytes) -> "Vstrace":
        body = struct.pack("<IB", 1 + len(payload), kind) + payload
        self.data += body + struct.pack("<I", zlib.crc32(body))
        return self

    @staticmethod
    def _prefix(us: int, tid: int = 1, device: int = 0, stack: int = 0) -> bytes:
        return struct.pack("<QIiI", START_CLOCK_NS + us * 1000, tid, device, stack)

    def fact(self, key: str, value: str) -> "Vstrace":
        k, v = key.encode(), value.encode()
        return self.record(FACT, struct.pack("<H", len(k)) + k + struct.pack("<I", len(v)) + v)

    def string(self, sid: int, text: str) -> "Vstrace":
        t = text.encode()
        return self.record(STRING, struct.pack("<II", sid, len(t)) + t)

    def frame(self, fid: int, pc: int, module: int, offset: int, symbol: int) -> "Vstrace":
        return self.record(FRAME, struct.pack("<IQIQI", fid, pc, module, offset, symbol))

    def stack(self, sid: int, frames: list[int]) -> "Vstrace":
        return self.record(STACK, struct.pack(f"<IH{len(frames)}I", sid, len(frames), *frames))

    def alloc(self, us: int, addr: int, size: int, device: int = 0, stack: int = 0) -> "Vstrace":
        return self.record(ALLOC, self._prefix(us, device=device, stack=stack)
                           + struct.pack("<BQQQ", 1, addr, size, 0))

    def free(self, us: int, addr: int) -> "Vstrace":
        return self.record(FREE, self._prefix(us) + struct.pack("<BQQ", 6, addr, 0))

    def push(self, us: int, name: str) -> "Vstrace":
        n = name.encode()
        return self.record(NVTX_PUSH, struct.pack("<QII", START_CLOCK_NS + us * 1000, 1, len(n))
                           + n)

    def pop(self, us: int) -> "Vstrace":
        return self.record(NVTX_POP, struct.pack("<QI", START_CLOCK_NS + us * 1000, 1))

    def end(self, us: int, reason: str = "exit") -> "Vstrace":
        r = reason.encode()
        return self.record(END, struct.pack("<QI", START_CLOCK_NS + us * 1000, len(r)) + r)

    def write(self, path: Path) -> Path:
        path.write_bytes(bytes(self.data))
        return path


def training_trace() -> Vstrace:
    """Two steps of a program whose framework takes 2 GiB up front and 256 MiB per forward."""
    t = Vstrace(rank=0).fact("nvtx", "on")
    t.string(1, "/usr/lib/libtorch_cuda.so").string(2, "_ZN3c104cuda6mallocEm")
    t.frame(1, 0x7F0000001000, 1, 0x1000, 2).stack(1, [1])
    t.alloc(1, 0x7000_0000_0000, 2048 * MiB, stack=1)  # weights and optimizer state
    us = 10
    for step in range(2):
        base = 0x7100_0000_0000 + step * 0x1000_0000
        t.push(us, "train_step").push(us + 1, "forward")
        t.alloc(us + 2, base, 256 * MiB, stack=1)
        t.pop(us + 3).push(us + 4, "backward").free(us + 5, base).pop(us + 6)
        t.push(us + 7, "optimizer").pop(us + 8).pop(us + 9)
        us += 100
    return t.end(us)


def _summary(run, path: Path, cwd: Path) -> dict:
    rc, out, err = run("report", path, "--json", "--summary-only", cwd=cwd)
    assert rc == 0, err
    assert err == ""
    return json.loads(out)


def test_native_trace_json_summary(run, inputs_dir, out_dir):
    path = training_trace().write(inputs_dir / "rank0.vstrace")
    s = _summary(run, path, out_dir)
    assert list_dir(out_dir) == []
    assert s["source"]["format"] == FORMAT
    assert s["source"]["generation"] == "native trace format 1.0"
    assert "pid 4242, rank 0" in s["source"]["generation_evidence"]
    assert any(n.startswith("driver-level memory") for n in s["notes"]), s["notes"]
    assert not any("truncated" in n for n in s["notes"])
    assert s["facts"]["has_segment_events"] is True
    assert s["facts"]["has_native_frames"] is True
    [dev] = s["devices"]
    assert dev["device"] == 0
    # Driver-level: both curves are the driver's allocations.
    assert dev["peak_allocated"]["bytes"] == (2048 + 256) * MiB
    assert dev["at_dump"]["reserved_bytes"] == 2048 * MiB
    assert dev["at_dump"]["allocated_bytes"] == 2048 * MiB
    assert dev["peak_reserved"]["bytes"] == (2048 + 256) * MiB


def test_native_trace_full_json_report(run, inputs_dir, out_dir):
    path = training_trace().write(inputs_dir / "rank0.vstrace")
    rc, out, err = run("report", path, "--json", cwd=out_dir)
    assert rc == 0, err
    report = json.loads(out)
    assert report["source"]["format"] == FORMAT


def test_native_trace_text_report(run, inputs_dir, out_dir):
    path = training_trace().write(inputs_dir / "rank0.vstrace")
    rc, out, err = run("report", path, cwd=out_dir)
    assert rc == 0, err
    assert FORMAT in out
    assert "driver-level memory" in out
    written = [p for p in list_dir(out_dir) if p.endswith(".sqlite")]
    assert len(written) == 1, list_dir(out_dir)


def test_truncated_native_trace_is_read_up_to_its_last_record(run, inputs_dir, out_dir):
    full = training_trace()
    cut = bytes(full.data[:-5])  # the end record is cut short
    path = inputs_dir / "crashed.vstrace"
    path.write_bytes(cut)
    s = _summary(run, path, out_dir)
    [note] = [n for n in s["notes"] if "truncated" in n]
    assert "the last record is cut short" in note
    [dev] = s["devices"]
    assert dev["peak_allocated"]["bytes"] == (2048 + 256) * MiB


def test_newer_native_trace_version_is_refused(run, inputs_dir, out_dir):
    path = Vstrace(major=2, minor=1).alloc(1, 0x1000, MiB).write(inputs_dir / "new.vstrace")
    rc, out, err = run("report", path, "--json", cwd=out_dir)
    assert_failure(rc, out, err, 1, ["native trace format version 2.1",
                                     "written by a newer vramscope"], out_dir)

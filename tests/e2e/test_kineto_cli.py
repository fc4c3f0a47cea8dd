"""End-to-end tests of `vramscope report` on PyTorch profiler traces (Kineto / Chrome trace JSON,
plain or gzipped): the real traces of the shared folder, small synthetic ones, and bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from conftest import REAL_FIXTURES, assert_one_error_line, list_dir, open_db

# file -> (GPU [memory] events, peak Total Allocated, peak Total Reserved); README section B.
# The legacy trace has no totals: its peak is what the trace's own allocs and frees give.
KINETO_FIXTURES = {
    "kineto_nov2022_v100_ddp_rank1_profile_memory.json.gz": (26770, 6629508096, 12782141440),
    "kineto_torch2.6_h100_qwen1.5-0.5b_inference.json.gz": (2250, 2088508416, 2629828608),
    "kineto_torch2.7rocm_mi300x_qwen1.5-0.5b_inference.json.gz": (2588, 2219047936, 2533359616),
    "kineto_torch1.9_v100_resnet50_legacy_memory_schema.pt.trace.json.gz": (8220, None, None),
}


def kineto_params() -> list:
    params = []
    for name in KINETO_FIXTURES:
        path = REAL_FIXTURES / name
        marks = [] if path.is_file() else [pytest.mark.skip(reason=f"{path} is absent")]
        params.append(pytest.param(path, id=name.split(".json")[0], marks=marks))
    return params


def expected_device(path: Path) -> int:
    """The device of the GPU [memory] events, read here with the json module."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    devices = {e["args"]["Device Id"] for e in events
               if e.get("name") == "[memory]" and e["args"]["Device Type"] in (1, 6)}
    assert len(devices) == 1, devices
    return devices.pop()


def grouped(n: int) -> str:
    return f"{n:,}"


# --------------------------------------------------------------------------------------------
# Real traces
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("trace", kineto_params())
def test_real_trace_text_report(trace, run, out_dir):
    events, peak_allocated, peak_reserved = KINETO_FIXTURES[trace.name]
    rc, out, err = run("report", trace, "-o", "r.sqlite", cwd=out_dir, timeout=120)
    assert rc == 0, err
    assert "PyTorch profiler trace (Kineto JSON)" in out
    assert f"cuda:{expected_device(trace)}" in out
    if peak_allocated is not None:
        assert f"peak allocated" in out
        assert f"({grouped(peak_allocated)} B)" in out, out
        assert f"({grouped(peak_reserved)} B)" in out, out
    else:
        assert "legacy" in out
        assert "a guess" in out  # the LIFO pairing note
    assert list_dir(out_dir) == ["r.sqlite"]


@pytest.mark.parametrize("trace", kineto_params())
def test_real_trace_json_summary(trace, run, out_dir):
    events, peak_allocated, peak_reserved = KINETO_FIXTURES[trace.name]
    rc, out, err = run("report", trace, "--json", "--summary-only", cwd=out_dir, timeout=120)
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["source"]["format"] == "PyTorch profiler trace (Kineto JSON)"
    assert doc["source"]["path"] == str(trace)
    assert doc["report"] is None
    assert list_dir(out_dir) == []
    [device] = doc["devices"]
    assert device["device"] == expected_device(trace)
    facts = doc["facts"]
    assert facts["has_trace"] and facts["has_times"] and facts["has_stacks"]
    if peak_allocated is not None:
        assert device["peak_allocated"]["bytes"] == peak_allocated
        assert device["peak_reserved"]["bytes"] == peak_reserved
        assert doc["peak_usage_bytes"] == peak_allocated
        assert "Addr/Total Allocated" in doc["source"]["generation"]
    else:
        assert "legacy" in doc["source"]["generation"]
        # Every free was paired with an allocation of the trace: the curve starts at 0.
        assert facts["frees_without_alloc"] == 0
        assert device["peak_allocated"]["bytes"] > 0
    # Allocs plus frees: one trace event per alloc, two per free (requested, completed).
    assert doc["source"]["allocations"] * 3 >= events


@pytest.mark.parametrize("trace", kineto_params())
def test_real_trace_database(trace, run, out_dir):
    events, peak_allocated, peak_reserved = KINETO_FIXTURES[trace.name]
    rc, out, err = run("report", trace, "-q", "-o", "x.sqlite", cwd=out_dir, timeout=120)
    assert rc == 0, err
    assert out == "" and err == ""
    with open_db(out_dir / "x.sqlite") as db:
        device = expected_device(trace)
        (peak,) = db.execute("SELECT peak_allocated_bytes FROM vramscope_devices WHERE device = ?",
                             (device,)).fetchone()
        (timeline_max,) = db.execute("SELECT max(allocated_bytes) FROM vramscope_timeline "
                                     "WHERE device = ?", (device,)).fetchone()
        assert timeline_max == peak
        if peak_allocated is not None:
            assert peak == peak_allocated
            (reserved_max,) = db.execute("SELECT max(reserved_bytes) FROM vramscope_timeline "
                                         "WHERE device = ?", (device,)).fetchone()
            assert reserved_max == peak_reserved
        steps = db.execute("SELECT count(*) FROM vramscope_annotations WHERE key = 'name' "
                           "AND value LIKE 'ProfilerStep#%'").fetchone()[0]
        assert steps >= 2  # every trace holds profiler steps (START and END)


# --------------------------------------------------------------------------------------------
# Synthetic traces
# --------------------------------------------------------------------------------------------


def memory_event(ts, nbytes, addr, allocated, reserved, device=0):
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1,
            "tid": 1, "ts": ts,
            "args": {"Device Type": 1, "Device Id": device, "Addr": addr, "Bytes": nbytes,
                     "Total Allocated": allocated, "Total Reserved": reserved}}


def op(name, ts, dur):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
            "args": {}}


MB = 1 << 20


def small_trace() -> dict:
    """3 MiB allocated before recording; an addmm output and a workspace; reserved grows once."""
    return {"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1,
         "ts": 0.5, "dur": 100},
        op("aten::addmm", 10, 20),
        op("aten::empty", 12, 2),
        memory_event(12.5, 4 * MB, 0x7F0000000000, 7 * MB, 20 * MB),
        memory_event(20.25, 8 * MB, 0x7F0001000000, 15 * MB, 40 * MB),
        memory_event(40.0, -8 * MB, 0x7F0001000000, 7 * MB, 40 * MB),
    ]}


@pytest.mark.parametrize("compress", [False, True], ids=["json", "json.gz"])
def test_synthetic_trace(compress, run, inputs_dir, out_dir):
    data = json.dumps(small_trace()).encode()
    path = inputs_dir / ("t.json.gz" if compress else "t.json")
    path.write_bytes(gzip.compress(data, mtime=0) if compress else data)
    rc, out, err = run("report", path, "--json", "-o", "t.sqlite", cwd=out_dir)
    assert rc == 0, err
    doc = json.loads(out)
    [device] = doc["devices"]
    assert device["peak_allocated"]["bytes"] == 15 * MB
    assert device["peak_reserved"]["bytes"] == 40 * MB
    assert device["at_dump"]["allocated_bytes"] == 7 * MB
    assert list_dir(out_dir) == ["t.sqlite"]
    with open_db(out_dir / "t.sqlite") as db:
        levels = db.execute("SELECT allocated_bytes, reserved_bytes FROM vramscope_timeline "
                            "ORDER BY event").fetchall()
    assert (15 * MB, 40 * MB) in levels
    assert levels[-1] == (7 * MB, 40 * MB)


# --------------------------------------------------------------------------------------------
# Bad input: exit 1, one line naming the file, nothing left behind
# --------------------------------------------------------------------------------------------


def _truncated_gzip() -> bytes:
    data = gzip.compress(json.dumps(small_trace()).encode(), mtime=0)
    return data[: len(data) // 2]


def _corrupt_gzip() -> bytes:
    """A trace big enough for several deflate blocks, one byte of its deflate data flipped."""
    doc = small_trace()
    doc["traceEvents"] = doc["traceEvents"] * 200
    data = bytearray(gzip.compress(json.dumps(doc).encode(), mtime=0))
    data[len(data) // 2] ^= 0xFF
    return bytes(data)


def _bytes_as_string() -> bytes:
    doc = small_trace()
    doc["traceEvents"][4]["args"]["Bytes"] = "8388608"
    return json.dumps(doc).encode()


BAD_TRACES = {
    "truncated-gzip": ("t.json.gz", _truncated_gzip(), ["gzip", "truncated"]),
    "corrupt-gzip": ("t.json.gz", _corrupt_gzip(), ["corrupt gzip data at compressed byte"]),
    "invalid-json-gzipped": ("t.json.gz",
                             gzip.compress(b'{"traceEvents": [{"name": "[memory]", "ph": }]}',
                                           mtime=0),
                             ["invalid JSON at byte 45", "corrupt"]),
    "no-trace-events": ("t.json", b'{"schemaVersion": 1, "deviceProperties": []}',
                        ["JSON", "without 'traceEvents'", "'schemaVersion'", "profiler traces"]),
    "invalid-json": ("t.json", b'{"traceEvents": [{"name": "[memory]", "ph": }]}',
                     ["invalid JSON at byte", "corrupt"]),
    "truncated-json": ("t.json", json.dumps(small_trace()).encode()[:-30],
                       ["invalid JSON", "truncated"]),
    "empty-trace-events": ("t.json", b'{"traceEvents": []}',
                           ["JSON", "holds no GPU [memory] events", "profile_memory=True"]),
    "cpu-memory-only": ("t.json", json.dumps({"traceEvents": [
        {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1,
         "args": {"Device Type": 0, "Device Id": -1, "Bytes": 8}}]}).encode(),
                        ["holds no GPU [memory] events", "1 of CPU memory"]),
    "bytes-is-a-string": ("t.json", _bytes_as_string(),
                          ["[memory] event 4", "'Bytes' is a string", "expected an integer"]),
    "event-not-an-object": ("t.json", b'{"traceEvents": [{"ph": "X"}, "oops"]}',
                            ["event 1 is a string", "expected an event object"]),
}


@pytest.mark.parametrize("name", list(BAD_TRACES))
def test_bad_trace_fails_cleanly(name, run, inputs_dir, out_dir):
    filename, data, phrases = BAD_TRACES[name]
    path = inputs_dir / filename
    path.write_bytes(data)
    for args in (("report", path), ("report", path, "-o", "r.sqlite", "--force"),
                 ("report", path, "--json")):
        rc, out, err = run(*args, cwd=out_dir)
        assert rc == 1, f"exit code {rc}, stderr: {err!r}"
        assert out == "", out
        line = assert_one_error_line(err)
        assert str(path) in line, line
        for phrase in phrases:
            assert phrase in line, f"missing {phrase!r} in {line!r}"
        assert list_dir(out_dir) == [], list_dir(out_dir)

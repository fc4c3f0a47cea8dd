"""Out-of-memory errors (the sidecar's "oom", the end's reason ``oom``).

PyTorch calls the observer when an allocation fails, before the exception unwinds the frames that
held the memory: the snapshot taken there still has them, with the allocator's own figures (what
was asked, what was free) and an NVML sample. Where the observer did not run (an older torch), what
PyTorch's OutOfMemoryError message says is read instead; an exception is an out-of-memory error
when it or one it was raised from or during is torch.cuda.OutOfMemoryError.
"""

from .nvml import _nvml_sample
from .state import _now_us, _say, _state


def _oom_observer(device, alloc, device_total, device_free):
    """PyTorch calls it when an allocation fails, before the exception unwinds the frames that held
    the memory: the snapshot taken here still has them."""
    s = _state
    try:
        if not s.recording or s.oom is not None:
            return
        cuda = s.torch.cuda
        s.oom_snapshot = cuda.memory._snapshot()
        s.oom = {"requested_bytes": int(alloc), "device_free": int(device_free),
                 "device_allocated": max(0, int(device_total) - int(device_free)),
                 "device_total": int(device_total), "device": int(device),
                 "allocated": cuda.memory_allocated(device), "reserved": cuda.memory_reserved(device),
                 "time_us": _now_us(), "step": s.step, "phase": s.phase, "message": None}
        _nvml_sample("oom", s.oom["time_us"], s.oom)
    except Exception as e:
        _say(f"could not take the snapshot at the out-of-memory error ({type(e).__name__}: {e})",
             error=True)


_UNITS = {"bytes": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def _parse_size(text):
    number, unit = text
    return int(float(number) * _UNITS[unit])


def _oom_from_message(message):
    """What PyTorch's out-of-memory message says (its sizes are rounded to 2 decimals)."""
    import re

    size = r"([\d.]+) (bytes|B|KiB|MiB|GiB|TiB)"
    oom = {"requested_bytes": None, "device_free": None, "device_allocated": None,
           "allocated": None, "reserved": None}
    m = re.search(r"Tried to allocate " + size, message)
    if m:
        oom["requested_bytes"] = _parse_size(m.groups())
    m = re.search(r"total capacity of " + size + r" of which " + size + " is free", message)
    if m:
        total = _parse_size(m.groups()[0:2])
        oom["device_free"] = _parse_size(m.groups()[2:4])
        oom["device_allocated"] = max(0, total - oom["device_free"])
    m = re.search(size + r" is allocated by PyTorch", message)
    if m:
        oom["allocated"] = _parse_size(m.groups())
        m2 = re.search(size + r" is reserved by PyTorch but unallocated", message)
        if m2:
            oom["reserved"] = oom["allocated"] + _parse_size(m2.groups())
    return oom


def _is_oom(exc):
    torch = _state.torch
    oom_type = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None) if torch else None
    seen = 0
    while exc is not None and seen < 8:
        if oom_type is not None and isinstance(exc, oom_type):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None

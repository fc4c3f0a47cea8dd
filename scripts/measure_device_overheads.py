#!/usr/bin/env python3
"""Measure, on a CUDA GPU, the device memory nvidia-smi counts outside PyTorch's caching allocator.

    python3 scripts/measure_device_overheads.py --out goldens/h100/device_overheads.json
    python3 scripts/measure_device_overheads.py --out /tmp/dry.json --dry-run-cpu

The fixed parts of the decomposition of nvidia-smi's figure (issue 17: reserved + context +
libraries + NCCL + other processes + the rest), each case in a fresh Python process so that
nothing of one is in another, one after the other (so the device's used memory, the fallback when
NVML cannot find a process by its pid, has no one else's in it):

  context_lazy    torch.cuda.init() and a 1-element tensor, CUDA_MODULE_LOADING=LAZY: the CUDA
                  context and torch's module images (the process's memory less torch's reserved)
  context_eager   the same with CUDA_MODULE_LOADING=EAGER (every kernel image loaded up front)
  cublas          then a 256x256 fp32 matmul (cuBLAS handle and what it allocates outside the
                  caching allocator), then a bf16 one (cuBLASLt)
  cudnn           then a Conv2d forward with cuDNN (its handle)
  nccl            then a NCCL process group of world size 1 (a HashStore) and one all_reduce
                  (the communicator)
  idle            after the cases, no process of ours on the device: its used memory (the
                  driver's reservation and other processes', listed) and NVML v2's reserved

Each library figure is the growth of the process's memory (NVML, by pid) over the step, less the
growth of torch.cuda.memory_reserved() (what the caching allocator took for the tensors and for
cuBLAS's workspace, which recent torch allocates through it). NVML through pynvml (nvidia-ml-py)
when it imports, else nvidia-smi's queries (whole MiB: `granularity_bytes` says which). Where NVML
does not list this process (a container's pid namespace), the device's used memory less the idle
figure stands in (`process_used_from` says so).

Writes --out (JSON, "format": "vramscope-device-overheads"): the device (name, compute capability,
memory, PCI bus id), driver, CUDA, torch, cuDNN and NCCL versions, the environment used, per
case its checkpoints (process's and device's memory, torch's reserved/allocated) and status, and
"figures" in bytes (null where a case failed). Exit 0 when every case ran, 1 when one failed,
3 when there is no GPU (without --dry-run-cpu).

--dry-run-cpu checks the wiring without a GPU: every case runs in its child on the CPU (the
matmuls and the convolution on CPU tensors, the process group with gloo), no NVML query is made,
and every figure is null.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import subprocess
import sys

CASES = ["context_lazy", "context_eager", "cublas", "cudnn", "nccl"]
MODULE_LOADING = {"context_eager": "EAGER"}  # the others: LAZY
ENV_KEYS = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTORCH_CUDA_ALLOC_CONF",
            "PYTORCH_ALLOC_CONF", "CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE",
            "TORCH_CUDNN_V8_API_DISABLED", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE",
            "NCCL_BUFFSIZE", "NCCL_NVLS_ENABLE", "TORCH_NCCL_AVOID_RECORD_STREAMS")
MiB = 1 << 20


# ------------------------------------------------------------------------ NVML, or nvidia-smi


class Smi:
    """The device's and a process's memory: pynvml when it imports, else nvidia-smi."""

    def __init__(self, dry: bool):
        self.source, self.nv, self.granularity = None, None, None
        if dry:
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nv, self.source, self.granularity = pynvml, "pynvml", 1
        except Exception:  # noqa: BLE001 - nvidia-smi is the fallback
            if shutil.which("nvidia-smi"):
                self.source, self.granularity = "nvidia-smi", MiB

    def driver(self):
        if self.nv is not None:
            v = self.nv.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        if self.source == "nvidia-smi":
            return _smi(["--query-gpu=driver_version"])[0][0]
        return None

    def query(self, bus: str, pid: int) -> dict:
        """{device_total, device_used, device_reserved, process_used, processes}; bytes."""
        if self.nv is not None:
            return self._query_nvml(bus, pid)
        if self.source == "nvidia-smi":
            return self._query_smi(bus, pid)
        return {"device_total": None, "device_used": None, "device_reserved": None,
                "process_used": None, "processes": None}

    def _query_nvml(self, bus, pid):
        nv = self.nv
        h = nv.nvmlDeviceGetHandleByPciBusId(bus)
        reserved = None
        try:
            m = nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)
            reserved = int(m.reserved)
        except Exception:  # noqa: BLE001 - v1 only
            m = nv.nvmlDeviceGetMemoryInfo(h)
        try:
            procs = [(int(p.pid), None if p.usedGpuMemory is None or p.usedGpuMemory >= (1 << 63)
                      else int(p.usedGpuMemory))
                     for p in nv.nvmlDeviceGetComputeRunningProcesses(h)]
        except Exception:  # noqa: BLE001
            procs = None
        return {"device_total": int(m.total), "device_used": int(m.used),
                "device_reserved": reserved, "process_used": _own(procs, pid),
                "processes": procs}

    def _query_smi(self, bus, pid):
        fields = ["memory.total", "memory.used", "memory.reserved"]
        try:
            row = _smi([f"--query-gpu={','.join(fields)}", "-i", bus])[0]
        except Exception:  # noqa: BLE001 - an older nvidia-smi without memory.reserved
            row = _smi([f"--query-gpu={','.join(fields[:2])}", "-i", bus])[0] + ["[N/A]"]
        total, used, reserved = (_mib(x) for x in row)
        try:
            procs = [(int(p), _mib(u))
                     for p, u in _smi(["--query-compute-apps=pid,used_memory", "-i", bus])]
        except Exception:  # noqa: BLE001
            procs = None
        return {"device_total": total, "device_used": used, "device_reserved": reserved,
                "process_used": _own(procs, pid), "processes": procs}


def _smi(args):
    r = subprocess.run(["nvidia-smi", *args, "--format=csv,noheader,nounits"],
                       capture_output=True, text=True, timeout=30, check=True)
    return [[x.strip() for x in line.split(",")] for line in r.stdout.splitlines() if line.strip()]


def _mib(text):
    try:
        return int(float(text) * MiB)
    except ValueError:
        return None  # [N/A]


def _own(procs, pid):
    if procs is None:
        return None
    mine = [u for p, u in procs if p == pid]
    return mine[0] if mine else None


# ------------------------------------------------------------------------ a case (the child)


def child(case: str, dry: bool) -> int:
    import torch

    smi = Smi(dry)
    device = "cpu" if dry else "cuda"
    out = {"case": case, "pid": os.getpid(), "checkpoints": [], "device": None}
    bus = None
    if not dry:
        torch.cuda.init()
        props = torch.cuda.get_device_properties(0)
        bus = (f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0")
        out["device"] = {"name": props.name, "sm": f"{props.major}.{props.minor}",
                         "total_memory": props.total_memory, "pci_bus_id": bus,
                         "uuid": str(getattr(props, "uuid", "")) or None}

    def checkpoint(label):
        if not dry:
            torch.cuda.synchronize()
        q = smi.query(bus, os.getpid()) if bus else Smi(True).query("", 0)
        q.pop("processes", None)
        q.update(label=label,
                 torch_reserved=None if dry else torch.cuda.memory_reserved(),
                 torch_allocated=None if dry else torch.cuda.memory_allocated())
        out["checkpoints"].append(q)

    keep = [torch.ones(1, device=device)]
    checkpoint("init")
    if case == "cublas":
        a = torch.randn(256, 256, device=device)
        keep.append(a @ a)
        checkpoint("matmul_fp32")
        b = a.to(torch.bfloat16)
        keep.append(b @ b)
        checkpoint("matmul_bf16")
    elif case == "cudnn":
        out["cudnn"] = {"enabled": torch.backends.cudnn.enabled,
                        "version": torch.backends.cudnn.version() if not dry else None}
        conv = torch.nn.Conv2d(3, 8, 3).to(device)
        keep.append(conv(torch.randn(1, 3, 32, 32, device=device)))
        checkpoint("conv")
    elif case == "nccl":
        import torch.distributed as dist

        backend = "gloo" if dry else "nccl"
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
        t = torch.ones(1024, device=device)
        dist.all_reduce(t)
        checkpoint("all_reduce")
        out["backend"] = backend
        try:
            out["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version())) if not dry else None
        except Exception:  # noqa: BLE001
            out["nccl_version"] = None
        dist.destroy_process_group()
    print("RESULT " + json.dumps(out), flush=True)
    return 0


# ------------------------------------------------------------------------ the driver


def run_case(case: str, dry: bool, timeout: int) -> dict:
    env = dict(os.environ)
    env["CUDA_MODULE_LOADING"] = MODULE_LOADING.get(case, "LAZY")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", case]
    if dry:
        cmd.append("--dry-run-cpu")
    result = {"status": "failed", "env": {"CUDA_MODULE_LOADING": env["CUDA_MODULE_LOADING"]}}
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        result["error"] = f"timed out after {timeout} s"
        return result
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        result["error"] = f"exit {p.returncode}: " + (p.stderr.strip().splitlines() or [""])[-1][:500]
        return result
    result.update(json.loads(lines[-1][len("RESULT "):]))
    result["status"] = "ok"
    return result


def _growth(c0, c1, idle_used):
    """The process's growth from checkpoint c0 to c1 outside torch's allocator."""
    def used(c):
        if c.get("process_used") is not None:
            return c["process_used"]
        if c.get("device_used") is not None and idle_used is not None:
            return c["device_used"] - idle_used
        return None
    u0, u1 = used(c0), used(c1)
    if u0 is None or u1 is None or c0.get("torch_reserved") is None:
        return None
    return (u1 - u0) - (c1["torch_reserved"] - c0["torch_reserved"])


def figures(cases: dict, idle: dict | None) -> dict:
    idle_used = idle.get("device_used") if idle else None
    f = {"context_lazy": None, "context_eager": None, "cublas_fp32": None, "cublaslt_bf16": None,
         "cudnn": None, "nccl": None, "driver_reserved": idle.get("device_reserved") if idle else None,
         "device_used_idle": idle_used}
    zero = {"process_used": 0, "device_used": idle_used, "torch_reserved": 0}
    for name in ("context_lazy", "context_eager"):
        c = cases.get(name, {})
        if c.get("status") == "ok":
            f[name] = _growth(zero, c["checkpoints"][0], idle_used)
    steps = {"cublas": [("cublas_fp32", 0, 1), ("cublaslt_bf16", 1, 2)], "cudnn": [("cudnn", 0, 1)],
             "nccl": [("nccl", 0, 1)]}
    for name, wanted in steps.items():
        c = cases.get(name, {})
        if c.get("status") == "ok":
            for key, a, b in wanted:
                f[key] = _growth(c["checkpoints"][a], c["checkpoints"][b], idle_used)
    return f


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="the JSON file to write")
    p.add_argument("--timeout", type=int, default=90, help="seconds per case (default 90)")
    p.add_argument("--dry-run-cpu", action="store_true", help="check the wiring on the CPU")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        if args.child not in CASES:
            print(f"measure_device_overheads: error: unknown case '{args.child}'", file=sys.stderr)
            return 2
        return child(args.child, args.dry_run_cpu)
    if not args.out:
        print("measure_device_overheads: error: --out is required", file=sys.stderr)
        return 2
    dry = args.dry_run_cpu
    import torch  # the versions only: CUDA is initialized in the children, never here

    if not dry and not torch.cuda.is_available():
        print("measure_device_overheads: error: no GPU (torch.cuda.is_available() is False); "
              "use --dry-run-cpu to check the script without one", file=sys.stderr)
        return 3
    smi = Smi(dry)
    cases = {}
    for case in CASES:
        cases[case] = run_case(case, dry, args.timeout)
        c = cases[case]
        print(f"{case}: {c['status']}" + (f" ({c['error']})" if c.get("error") else ""),
              flush=True)
    device = next((c["device"] for c in cases.values() if c.get("device")), None)
    idle = None
    if device and smi.source:
        idle = smi.query(device["pci_bus_id"], -1)
        idle["other_processes"] = idle.pop("processes")
    doc = {
        "format": "vramscope-device-overheads", "version": 1, "dry_run_cpu": dry,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": device, "driver": smi.driver() if smi.source else None,
        "cuda": torch.version.cuda, "torch": torch.__version__,
        "python": platform.python_version(),
        "cudnn": cases["cudnn"].get("cudnn", {}).get("version"),
        "nccl": cases["nccl"].get("nccl_version"),
        "nvml_source": smi.source, "granularity_bytes": smi.granularity,
        "process_used_from": None, "env": {k: os.environ[k] for k in ENV_KEYS if k in os.environ},
        "idle": idle, "figures": figures(cases, idle), "cases": cases,
    }
    checkpoints = [c for case in cases.values() for c in case.get("checkpoints", [])]
    if checkpoints and not dry:
        doc["process_used_from"] = ("nvml_pid" if all(c["process_used"] is not None
                                                      for c in checkpoints)
                                    else "device_used_less_idle")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    for key, value in doc["figures"].items():
        print(f"  {key:<16} {'-' if value is None else f'{value / MiB:.1f} MiB'}")
    failed = [n for n, c in cases.items() if c["status"] != "ok"]
    print(f"{len(CASES) - len(failed)}/{len(CASES)} ok; wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

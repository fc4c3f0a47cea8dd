#!/usr/bin/env python3
"""The results of scripts/gpu_session.sh: results.json and results.md (standard library only).

    gpu_session_results.py write STAGE SLUG DRY BUDGET ELAPSED MANIFEST   # run, on the device
    gpu_session_results.py merge OLD.json NEW.json OUT_DIR                 # unpack, here

`write` reads STAGE/steps.tsv (step, status, seconds), STAGE/gpu.json and the steps' logs, and
writes STAGE/results.json and STAGE/results.md. `merge` folds a later call's results into the
ones already in goldens/<gpu>/ when both ran on the same GPU model (a second call that ran the
steps the first had no time for, or reran one after a fix to its script, with --only): a step
takes the later call's outcome unless that call did not select it, and `bundles` lists each call's
bundle. It writes OUT_DIR/gpu_session.json and gpu_session.md.
"""

from __future__ import annotations

import datetime
import json
import os
import sys

STEPS = ["preflight", "device_overheads", "jax_goldens", "run_goldens", "native", "pytest_plugin",
         "techniques", "overhead", "modern_goldens", "goldens", "oom_golden", "hf_goldens"]


def overheads_summary(path: str) -> list[str] | None:
    """The figures of the device_overheads step (scripts/measure_device_overheads.py's JSON)."""
    try:
        doc = json.load(open(path))
        figures = doc["figures"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    rows = ["| figure | bytes | MiB |", "|---|---|---|"]
    for key, value in figures.items():
        rows.append(f"| {key} | {'-' if value is None else value} | "
                    f"{'-' if value is None else f'{value / 2**20:.1f}'} |")
    failed = [f"{n}: {c.get('error', c.get('status'))}" for n, c in doc.get("cases", {}).items()
              if c.get("status") != "ok"]
    if failed:
        rows += ["", "Failed: " + "; ".join(failed)]
    return rows


def modern_summary(path: str) -> list[str] | None:
    """The table of the modern_goldens step (scripts/capture_modern_goldens.py's metadata.json):
    per case its status, peaks and the private pools its snapshot holds at the dump."""
    try:
        meta = json.load(open(path))
        cases = meta["cases"]
    except (OSError, ValueError, KeyError, TypeError):
        return None

    def mib(n):
        return "-" if n is None else f"{n / 2**20:.1f} MiB"

    rows = ["| case | status | max allocated | max reserved | private pools at dump |",
            "|---|---|---|---|---|"]
    for name, c in cases.items():
        status = c.get("status", "?")
        if status == "skipped":
            status += ": " + str(c.get("why", ""))
        pools = c.get("private_pools_at_dump")
        rows.append(f"| {name} | {status} | {mib(c.get('max_memory_allocated'))} | "
                    f"{mib(c.get('max_memory_reserved'))} | "
                    f"{', '.join(pools) if pools else '-'} |")
    return rows


def markdown(doc: dict, overhead: str | None, modern: list[str] | None = None,
             overheads: list[str] | None = None) -> str:
    gpu = doc["gpu"]
    md = [f"# GPU session {doc['date']}" + (" (DRY RUN, CPU only)" if doc["dry_run"] else ""), ""]
    md.append(f"GPU: {gpu.get('name')}, driver {gpu.get('driver_version')}, "
              f"{gpu.get('memory_total') or '-'}, compute capability "
              f"{gpu.get('compute_capability') or '-'}; torch {gpu.get('torch')} (CUDA "
              f"{gpu.get('torch_cuda')}), Python {gpu.get('python')}, transformers "
              f"{gpu.get('transformers')}, lightning {gpu.get('lightning')}, jax {gpu.get('jax')}; "
              f"{gpu.get('vramscope')}")
    if doc.get("bundle"):
        md += ["", "Bundle: " + "; ".join(line for line in doc["bundle"][1:4])]
    calls = doc.get("calls", 1)
    md += ["", f"Budget {doc['budget_s']} s, used {doc['elapsed_s']} s"
           + (f" (last of {calls} calls)" if calls > 1 else "") + ".", "",
           "| step | status | seconds |", "|---|---|---|"]
    md += [f"| {s['step']} | {s['status']} | {s['seconds']} |" for s in doc["steps"]]
    if overheads:
        md += ["", "Device memory outside torch's allocator (device_overheads, "
               "scripts/measure_device_overheads.py):", ""] + overheads
    if modern:
        md += ["", "Compiled training, CUDA graphs and pools (modern_goldens, "
               "scripts/capture_modern_goldens.py):", ""] + modern
    if overhead:
        md += ["", "Capture overhead (bench/capture_overhead.py):", "", "```", overhead.rstrip(),
               "```"]
    return "\n".join(md) + "\n"


def write(stage, slug, dry, budget, elapsed, manifest) -> int:
    steps = []
    with open(os.path.join(stage, "steps.tsv")) as f:
        for line in f:
            name, status, seconds = line.rstrip("\n").split("\t")
            log = os.path.join(stage, "logs", name + ".log")
            tail = open(log, errors="replace").read()[-1500:] if os.path.exists(log) else ""
            steps.append({"step": name, "status": status, "seconds": int(seconds),
                          "log_tail": tail})
    try:
        gpu = json.load(open(os.path.join(stage, "gpu.json")))
    except (OSError, ValueError):
        gpu = {}
    dry = dry == "1"
    doc = {"format": "vramscope-gpu-session", "version": 1, "dry_run": dry,
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "budget_s": int(budget), "elapsed_s": int(elapsed), "gpu": gpu,
           "bundle": open(manifest).read().splitlines()[:5] if os.path.exists(manifest) else None,
           "steps": steps,
           "note": ("DRY RUN on a machine without a GPU: CPU stand-ins only; nothing here is "
                    "ground truth" if dry else "the steps marked ok ran on the GPU named above")}
    with open(os.path.join(stage, "results.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    overhead = os.path.join(stage, "goldens", slug, "capture_overhead.txt")
    modern = modern_summary(os.path.join(stage, "goldens", slug, "modern", "metadata.json"))
    overheads = overheads_summary(os.path.join(stage, "goldens", slug, "device_overheads.json"))
    with open(os.path.join(stage, "results.md"), "w") as f:
        f.write(markdown(doc, open(overhead).read() if os.path.exists(overhead) else None,
                         modern, overheads))
    return 0


def merge(old_path, new_path, out_dir) -> int:
    new = json.load(open(new_path))
    old = json.load(open(old_path)) if os.path.exists(old_path) else None
    # A later call on the same GPU model (a second call for the steps the first had no time for,
    # or one rerunning a step after a fix to its script) adds to the results: each step keeps its
    # latest outcome, and every call's bundle is listed.
    same_gpu = old and (old.get("gpu") or {}).get("name") == (new.get("gpu") or {}).get("name")
    if same_gpu and not old.get("dry_run") and not new.get("dry_run"):
        bundles = old.get("bundles") or [old.get("bundle")]
        if new.get("bundle") not in bundles:
            bundles.append(new.get("bundle"))
        new["bundles"] = bundles
        by_step = {s["step"]: s for s in old["steps"]}
        for s in new["steps"]:
            if s["step"] not in by_step or not s["status"].startswith("skipped: not selected"):
                by_step[s["step"]] = s
        new["steps"] = [by_step[n] for n in STEPS if n in by_step]
        new["calls"] = old.get("calls", 1) + 1
    with open(os.path.join(out_dir, "gpu_session.json"), "w") as f:
        json.dump(new, f, indent=1)
        f.write("\n")
    overhead = os.path.join(out_dir, "capture_overhead.txt")
    modern = modern_summary(os.path.join(out_dir, "modern", "metadata.json"))
    overheads = overheads_summary(os.path.join(out_dir, "device_overheads.json"))
    with open(os.path.join(out_dir, "gpu_session.md"), "w") as f:
        f.write(markdown(new, open(overhead).read() if os.path.exists(overhead) else None,
                         modern, overheads))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 8 and sys.argv[1] == "write":
        sys.exit(write(*sys.argv[2:]))
    if len(sys.argv) == 5 and sys.argv[1] == "merge":
        sys.exit(merge(*sys.argv[2:]))
    sys.exit(__doc__)

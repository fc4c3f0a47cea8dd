#!/usr/bin/env python3
"""Ground truth for JAX memory (issue 42): what JAX and XLA themselves record of a real training
step on a GPU, kept as compact goldens for the JAX sources to be tested against.

    python3 scripts/capture_jax_goldens.py --out goldens/h200/jax [--dry-run-cpu]

Per case (an MLP trained with Adam, written with jax.numpy alone, in fp32 and in bf16), each in a
fresh Python with XLA_PYTHON_CLIENT_PREALLOCATE=false (so the device's figures are the buffers',
not XLA's up-front reservation):

- `<case>.memprof.pb.gz`: jax.profiler.device_memory_profile() after the last step (pprof, already
  gzipped by JAX: the live buffers with their Python stacks and kinds);
- `<case>.xplane.pb.gz`: the XSpace of jax.profiler.trace() around two steps (gzipped here), with
  the allocator's memory events where XLA records them;
- `<case>.roles.prof`: the same moment through vramscope.jax_memory.save_profile (each buffer's
  role, the step from XLA's analysis): its report's peak is vramscope's estimate of the step's,
  which step3's peak_bytes_in_use measures;
- `<case>.json`: XLA's compiled.memory_analysis() of the jitted step, the device's memory_stats()
  after each phase (init, compiled, first step, last step), the parameter and optimizer-state
  bytes counted from the arrays, and whether the XSpace names the allocator's memory events
  (names are interned per plane, so this is a presence, not a count).

Then `oom_eager.json` and `oom_jit.json`: XLA's own out-of-memory messages (an array, and a jitted
step whose temporaries do not fit) under XLA_PYTHON_CLIENT_MEM_FRACTION, for `explain`.

--dry-run-cpu runs the same plumbing on the CPU backend: nothing it writes is ground truth.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from golden_capture.common import run_info, utc_now, write_json
from golden_capture.driver import run_process

# One case, run in a child Python: argv = case name, dtype, out folder, hidden width, batch.
CASE_PROGRAM = r'''
import glob, gzip, json, os, sys, time
import jax, jax.numpy as jnp
name, dtype_name, out, width, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
dtype = {"fp32": jnp.float32, "bf16": jnp.bfloat16}[dtype_name]
dev = jax.devices()[0]
stats = {}
def record(phase):
    jax.block_until_ready(jnp.zeros(()))
    s = dev.memory_stats()
    stats[phase] = {k: int(v) for k, v in (s or {}).items()}

def init(key, sizes):
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        key, k = jax.random.split(key)
        params.append({"w": (jax.random.normal(k, (fan_in, fan_out)) / fan_in ** 0.5).astype(dtype),
                       "b": jnp.zeros((fan_out,), dtype)})
    return params

def forward(params, x):
    for layer in params[:-1]:
        x = jax.nn.gelu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]

def loss_fn(params, x, y):
    return jnp.mean((forward(params, x).astype(jnp.float32) - y) ** 2)

def adam_init(params):
    zeros = lambda p: jnp.zeros(p.shape, jnp.float32)
    return {"m": jax.tree_util.tree_map(zeros, params), "v": jax.tree_util.tree_map(zeros, params),
            "t": jnp.zeros((), jnp.int32)}

def train_step(params, opt, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    t = opt["t"] + 1
    m = jax.tree_util.tree_map(lambda m, g: 0.9 * m + 0.1 * g.astype(jnp.float32), opt["m"], grads)
    v = jax.tree_util.tree_map(lambda v, g: 0.999 * v + 0.001 * jnp.square(g.astype(jnp.float32)), opt["v"], grads)
    def update(p, m, v):
        mh, vh = m / (1 - 0.9 ** t), v / (1 - 0.999 ** t)
        return (p.astype(jnp.float32) - 1e-3 * mh / (jnp.sqrt(vh) + 1e-8)).astype(p.dtype)
    params = jax.tree_util.tree_map(update, params, m, v)
    return params, {"m": m, "v": v, "t": t}, loss

sizes = [width, 4 * width, 4 * width, width]
key = jax.random.PRNGKey(0)
params = init(key, sizes)
opt = adam_init(params)
x = jax.random.normal(jax.random.PRNGKey(1), (batch, width)).astype(dtype)
y = jax.random.normal(jax.random.PRNGKey(2), (batch, width))
record("init")
step = jax.jit(train_step, donate_argnums=(0, 1))
compiled = step.lower(params, opt, x, y).compile()
record("compiled")  # the peak so far includes what compiling took (GEMM autotuning's buffers)
analysis = compiled.memory_analysis()
fields = [f for f in dir(analysis) if f.endswith("_in_bytes")] if analysis is not None else []
memory_analysis = {f: int(getattr(analysis, f)) for f in fields}
params, opt, loss = step(params, opt, x, y)
jax.block_until_ready(loss)
record("step1")
logdir = os.path.join(out, name + ".trace")
with jax.profiler.trace(logdir):
    for _ in range(2):
        params, opt, loss = step(params, opt, x, y)
    jax.block_until_ready(loss)
record("step3")
with open(os.path.join(out, name + ".memprof.pb.gz"), "wb") as f:
    f.write(jax.profiler.device_memory_profile())
# vramscope's writer beside JAX's (python/vramscope on PYTHONPATH): the buffers named by role
# (this optimizer is hand-written, so named outright) and the step from XLA's analysis; its
# report's peak is the estimate that step3's peak_bytes_in_use checks.
roles = None
try:
    import vramscope.jax_memory
    roles = vramscope.jax_memory.save_profile(os.path.join(out, name + ".roles.prof"),
                                              weights=params, optimizer_state=opt)
    roles["file"] = name + ".roles.prof"
except Exception as e:  # a failure is recorded, not fatal: JAX's own profile is the golden
    roles = {"error": f"{type(e).__name__}: {e}"}
planes = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
xplane = {}
if planes:
    raw = open(planes[0], "rb").read()
    with gzip.GzipFile(os.path.join(out, name + ".xplane.pb.gz"), "wb", 9, mtime=0) as g:
        g.write(raw)
    # XSpace interns event names in each plane's metadata: a name's presence, not a count.
    xplane = {"bytes": len(raw), "has_memory_allocation_name": raw.count(b"MemoryAllocation"),
              "has_memory_deallocation_name": raw.count(b"MemoryDeallocation"),
              "file": name + ".xplane.pb.gz"}
nbytes = lambda tree: sum(int(a.nbytes) for a in jax.tree_util.tree_leaves(tree))
json.dump({"case": name, "dtype": dtype_name, "layers": sizes, "batch": batch,
           "device_kind": dev.device_kind, "platform": dev.platform,
           "jax": jax.__version__, "jaxlib": __import__("jaxlib").__version__,
           "param_bytes": nbytes(params), "optimizer_state_bytes": nbytes(opt),
           "input_bytes": nbytes((x, y)), "loss": float(loss),
           "memory_analysis": memory_analysis, "memory_stats": stats, "xplane": xplane,
           "memprof": name + ".memprof.pb.gz", "roles": roles,
           "env": {k: v for k, v in os.environ.items() if k.startswith(("XLA_", "JAX_"))}},
          open(os.path.join(out, name + ".json"), "w"), indent=1)
print(name, "ok", json.dumps(memory_analysis), json.dumps(stats.get("step3", {})))
'''

# An out-of-memory, in a child Python under a small XLA_PYTHON_CLIENT_MEM_FRACTION:
# argv = kind ("eager" or "jit"), out file. The message is what XLA raises, whole.
OOM_PROGRAM = r'''
import json, sys
import jax, jax.numpy as jnp
kind, out = sys.argv[1], sys.argv[2]
dev = jax.devices()[0]
total = int((dev.memory_stats() or {}).get("bytes_limit", 8 << 30))
n = int(total * 1.5) // 4          # 1.5x the allocator's limit, in fp32 elements
result = {"kind": kind, "bytes_limit": total, "device_kind": dev.device_kind, "jax": jax.__version__}
try:
    if kind == "eager":
        a = jnp.ones((n,), jnp.float32)
        a.block_until_ready()
    else:
        side = int(n ** 0.5)          # the product alone is 1.5x the limit
        f = jax.jit(lambda a: jnp.sum((a @ a.T) * 2.0 + 1.0))
        a = jnp.ones((side, side // 64), jnp.float32)
        f(a).block_until_ready()
    result["message"] = None
except Exception as e:  # XlaRuntimeError (jax.errors.JaxRuntimeError in newer versions)
    result["message"] = str(e)
    result["exception"] = type(e).__module__ + "." + type(e).__name__
result["memory_stats"] = {k: int(v) for k, v in (dev.memory_stats() or {}).items()}
json.dump(result, open(out, "w"), indent=1)
print(kind, "message:", (result["message"] or "none")[:300])
sys.exit(0 if result["message"] else 1)
'''

CASES = [("mlp_adam_fp32", "fp32", 2048, 1024), ("mlp_adam_bf16", "bf16", 2048, 1024)]


def run(cmd: list[str], env: dict, timeout: float) -> tuple[int, str]:
    p = run_process(cmd, env=env, timeout=timeout)
    if p["timed_out"]:
        return 124, p["stdout"] + p["stderr"] + f"\n(killed after {timeout:.0f} s)"
    return p["rc"], p["stdout"] + p["stderr"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--python", default=sys.executable, help="a Python with JAX")
    ap.add_argument("--timeout", type=float, default=90, help="seconds per case")
    ap.add_argument("--dry-run-cpu", action="store_true",
                    help="no GPU: the CPU backend, small shapes; nothing written is ground truth")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    python_dir = str(Path(__file__).resolve().parent.parent / "python")
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false", PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(p for p in (python_dir, os.environ.get("PYTHONPATH"))
                                          if p))
    if args.dry_run_cpu:
        env["JAX_PLATFORMS"] = "cpu"
    cases: dict[str, dict] = {}

    def write_metadata() -> None:
        # Written after every case, so a step cut short by its time-out keeps what finished.
        meta = {"format": "vramscope-jax-goldens-metadata", "version": 1,
                **run_info(utc_now(), args.dry_run_cpu, quote_command=False), "cases": cases}
        write_json(args.out / "metadata.json", meta, indent=1)

    with tempfile.TemporaryDirectory(prefix="vramscope-jax-") as tmp:
        for name, dtype, width, batch in CASES:
            if args.dry_run_cpu:
                width, batch = 256, 64
            rc, log = run([args.python, "-c", CASE_PROGRAM, name, dtype, tmp, str(width),
                           str(batch)], env, args.timeout)
            case = {"status": "ok" if rc == 0 else f"failed: exit {rc}", "log_tail": log[-1500:]}
            produced = Path(tmp) / f"{name}.json"
            if rc == 0 and produced.exists():
                doc = json.loads(produced.read_text())
                for key in ("memprof", "xplane", "roles"):
                    f = doc[key].get("file") if key != "memprof" and doc.get(key) else doc.get(key)
                    if isinstance(f, str) and (Path(tmp) / f).exists():
                        (args.out / f).write_bytes((Path(tmp) / f).read_bytes())
                (args.out / produced.name).write_text(produced.read_text())
                case.update(roles=doc.get("roles"), memory_analysis=doc["memory_analysis"],
                            peak_bytes_in_use=doc["memory_stats"].get("step3", {}).get(
                                "peak_bytes_in_use"), xplane=doc["xplane"])
            cases[name] = case
            print(f"{name}: {case['status']}", flush=True)
            write_metadata()
        if not args.dry_run_cpu:
            oom_env = dict(env, XLA_PYTHON_CLIENT_MEM_FRACTION="0.05")
            for kind in ("eager", "jit"):
                target = args.out / f"oom_{kind}.json"
                rc, log = run([args.python, "-c", OOM_PROGRAM, kind, str(target)], oom_env,
                              args.timeout)
                cases[f"oom_{kind}"] = {"status": "ok" if rc == 0 else f"failed: exit {rc}",
                                        "log_tail": log[-1500:]}
                print(f"oom_{kind}: {cases[f'oom_{kind}']['status']}", flush=True)
                write_metadata()
    failed = [n for n, c in cases.items() if c["status"] != "ok"]
    print(f"{len(cases) - len(failed)} of {len(cases)} cases into {args.out}"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

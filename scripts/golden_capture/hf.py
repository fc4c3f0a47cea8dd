"""What capture_hf_goldens.py's child records besides the shared measures: the attention kernels
a forward runs, the SDPA backends enabled, and the counts prediction needs from the inventory,
with their sanity checks. torch is passed in: importing this module needs the stdlib only."""

from __future__ import annotations

from collections import Counter

from .common import fmt_bytes

# The sidecar's texts.
INPUTS_NOTE_TOKENS = ("synthetic, made on the CPU and moved in the 'inputs' phase; token ids "
                      "uniform over the vocabulary, labels a copy of them (causal LMs shift "
                      "them inside the loss); no attention mask")
INPUTS_NOTE_IMAGE = ("synthetic, made on the CPU and moved in the 'inputs' phase; pixel "
                     "values standard normal, labels uniform over num_labels")
LOOP = ("per step: optimizer.zero_grad(set_to_none=True); batch .to(device); "
        "out = model(**batch, **forward_kwargs), loss = out.loss (under autocast "
        "when bf16 autocast); loss.backward(); optimizer.step(); loss.item() and the "
        "release of batch, output and loss (examples/training/hf_models.py "
        "train_step)")
SETUP = ("model built on the CPU from the config (random weights, torch.manual_seed"
         "(seed)), gradient checkpointing / LoRA / bf16 applied there, then "
         ".to(device); AdamW constructed (its state is created by the first step)")
COUNTS_AT = ("after_first_step: after step 1's optimizer.step() (gradients and AdamW state "
             "exist); end: after the last step. *_bytes: of the distinct storages behind the "
             "tensors (a tied weight counts once; a view counts its whole storage), i.e. "
             "memory held; *_tensor_bytes: numel x element size of the tensors themselves; "
             "optimizer_state excludes AdamW's scalar 'step' tensors, counted apart")
PARAMETER_FIELDS = ["name", "shape", "dtype", "requires_grad"]

# SDPA kernels as the ATen ops a TorchDispatchMode sees (the math fallback is decomposed into
# matmul/softmax, so it shows as none of these).
ATTENTION_OP_NAMES = {
    "_scaled_dot_product_flash_attention": "flash",
    "_scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
    "_scaled_dot_product_efficient_attention": "mem-efficient",
    "_scaled_dot_product_cudnn_attention": "cuDNN",
    "_scaled_dot_product_fused_attention_overrideable": "overrideable",
    "_flash_attention_forward": "flash",
    "_efficient_attention_forward": "mem-efficient",
}


def sdpa_flags(torch) -> dict:
    """Which scaled_dot_product_attention backends PyTorch may choose (torch.backends.cuda)."""
    b = torch.backends.cuda
    names = {"flash": "flash_sdp_enabled", "mem_efficient": "mem_efficient_sdp_enabled",
             "math": "math_sdp_enabled", "cudnn": "cudnn_sdp_enabled"}
    return {k: bool(getattr(b, fn)()) for k, fn in names.items() if hasattr(b, fn)}


def driver_sdpa_flags() -> dict | None:
    """sdpa_flags() in the driver's process, None where torch does not import."""
    try:
        import torch
        return sdpa_flags(torch)
    except Exception:  # noqa: BLE001 - informative only
        return None


def probe_attention_ops(torch, forward, model, cpu_batch: dict, case, device) -> dict:
    """The attention kernels one forward of the case runs (forward(model, batch, case, device):
    hf_models.forward), as ATen op names seen by a TorchDispatchMode (below autocast, so with the
    dtypes autocast chose). Runs after the measured steps and after the snapshot is taken, so it
    changes nothing recorded; grad mode, autocast, train mode and shapes are the measured steps',
    which is what SDPA's choice depends on."""
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError as e:
        return {"error": f"no TorchDispatchMode: {e}"}
    seen: Counter = Counter()

    class AttentionOps(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func)  # e.g. "aten._scaled_dot_product_flash_attention.default"
            if "attention" in name or "scaled_dot_product" in name:
                seen[name] += 1
            return func(*args, **(kwargs or {}))

    try:
        batch = {k: v.to(device) for k, v in cpu_batch.items()}
        with AttentionOps():
            out, loss = forward(model, batch, case, device)
        del out, loss, batch
    except Exception as e:  # noqa: BLE001 - informative only
        return {"error": f"{type(e).__name__}: {e}", "ops": dict(seen)}
    # "aten.<op>.<overload>" -> <op>
    kernels = sorted({ATTENTION_OP_NAMES[n.split(".")[1]] for n in seen
                      if n.count(".") >= 2 and n.split(".")[1] in ATTENTION_OP_NAMES})
    return {
        "ops": dict(sorted(seen.items())),
        "kernels": kernels or ["none seen (math fallback or eager attention)"],
        "how": "ATen ops whose name contains 'attention' or 'scaled_dot_product' during one more "
               "forward (same batch, autocast, grad and train mode), run after the measured steps",
    }


def compact_inventory(inv: dict, expected: dict | None) -> dict:
    """What prediction needs from measure.inventory(): counts and bytes, with sanity checks."""
    t = inv["totals"]
    params = inv["parameters"]
    trainable = [p for p in params if p["requires_grad"]]
    trainable_bytes = sum(p["nbytes"] for p in trainable)
    by_dtype: Counter = Counter()
    for p in params:
        by_dtype[p["dtype"]] += p["nbytes"]
    grads_by_dtype: Counter = Counter()
    for g in inv["gradients"]:
        grads_by_dtype[g["dtype"]] += g["nbytes"]
    state_by_dtype: Counter = Counter()
    steps = []
    for s in inv["optimizer_state"]:
        if "nbytes" not in s:
            continue
        if s["key"] == "step":
            steps.append(s)
        else:
            state_by_dtype[s["dtype"]] += s["nbytes"]
    gradient_tensor_bytes = sum(grads_by_dtype.values())
    state_tensor_bytes = sum(state_by_dtype.values())
    # The checks compare the tensors' own bytes (numel x element size). The storage totals may be
    # larger: a gradient can be a view that keeps a bigger buffer alive (seen on the CPU at batch
    # 1: ViT's cls_token gradient is a slice of the embeddings' gradient, AccumulateGrad keeps
    # it as is), which is memory held, hence reported as gradient_bytes.
    checks = {
        "parameters_match_expected": (None if expected is None
                                      else t["parameter_numel"] == expected["total"]),
        "trainable_parameters_match_expected": (
            None if expected is None else t["trainable_parameter_numel"] == expected["trainable"]),
        "one_gradient_per_trainable_parameter": t["gradient_tensors"] == len(trainable),
        "gradient_tensor_bytes_equal_trainable_bytes": gradient_tensor_bytes == trainable_bytes,
        "optimizer_state_only_for_trainable": t["params_with_state"] == len(trainable),
        "optimizer_state_tensor_bytes_twice_trainable_bytes": (
            state_tensor_bytes == 2 * trainable_bytes),
    }
    return {
        "parameters": t["parameter_numel"],
        "trainable_parameters": t["trainable_parameter_numel"],
        "frozen_parameters": t["parameter_numel"] - t["trainable_parameter_numel"],
        "parameter_tensors": t["parameter_tensors"],
        "trainable_parameter_tensors": len(trainable),
        "parameter_bytes": t["parameter_bytes"],
        "trainable_parameter_bytes": trainable_bytes,
        "parameter_bytes_by_dtype": dict(sorted(by_dtype.items())),
        "buffer_tensors": t["buffer_tensors"],
        "buffer_bytes": t["buffer_bytes"],
        "gradient_tensors": t["gradient_tensors"],
        "gradient_bytes": t["gradient_bytes"],
        "gradient_tensor_bytes": gradient_tensor_bytes,
        "gradient_tensor_bytes_by_dtype": dict(sorted(grads_by_dtype.items())),
        "optimizer_state_tensors": t["optimizer_state_tensors"],
        "optimizer_state_bytes": t["optimizer_state_bytes"],
        "optimizer_state_tensor_bytes": state_tensor_bytes,
        "optimizer_state_tensor_bytes_by_dtype": dict(sorted(state_by_dtype.items())),
        "optimizer_state_per_key": t["optimizer_state_per_key"],
        "optimizer_step_tensors": {"count": len(steps),
                                   "bytes": sum(s["nbytes"] for s in steps),
                                   "devices": sorted({s["device"] for s in steps})},
        "expected_parameters": expected,
        "checks": checks,
        "checks_passed": all(v is not False for v in checks.values()),
    }


def parameter_table(inv: dict) -> dict:
    rows = [[p["name"], p["shape"], p["dtype"], p["requires_grad"]] for p in inv["parameters"]]
    tied = {a: p["name"] for p in inv["parameters"] for a in p.get("aliases", [])}
    return {"fields": PARAMETER_FIELDS, "rows": rows, "tied": tied}


def metadata_entry(sidecar: dict, sidecar_path) -> dict:
    """A case's line in the HF suite's metadata.json, from its sidecar."""
    snap = sidecar.get("snapshot") or {}
    peak = sidecar.get("peak") or {}
    counts = sidecar["counts"]["after_first_step"]
    return {
        "sidecar": sidecar_path.name,
        "sidecar_bytes": sidecar_path.stat().st_size,
        "snapshot": snap.get("file"),
        "snapshot_bytes": snap.get("gz_bytes") if snap.get("file") else None,
        "snapshot_gz_bytes": snap.get("gz_bytes"),
        "snapshot_note": snap.get("note"),
        "trace_events": (snap.get("summary") or {}).get("trace_events"),
        "max_memory_allocated": peak.get("max_allocated"),
        "max_memory_reserved": peak.get("max_reserved"),
        "peak_at": peak.get("max_allocated_at"),
        "attn_implementation": sidecar["config"].get("attn_implementation"),
        "attention_kernels": (sidecar["config"].get("attention_kernels") or {}).get("kernels"),
        "parameters": counts["parameters"],
        "trainable_parameters": counts["trainable_parameters"],
        "parameter_bytes": counts["parameter_bytes"],
        "gradient_bytes": counts["gradient_bytes"],
        "optimizer_state_bytes": counts["optimizer_state_bytes"],
        "checks_passed": counts["checks_passed"],
        "checks_failed": [k for k, v in counts["checks"].items() if v is False],
        "losses": [s.get("loss") for s in sidecar.get("steps", [])],
    }


def case_line(r: dict, seconds: float) -> str:
    """What the driver's line of a case that ran says after its head."""
    peak_at = r.get("peak_at") or {}
    where = f" ({peak_at.get('step')} {peak_at.get('phase')})" if peak_at else ""
    if r.get("snapshot"):
        snap = f"snapshot {fmt_bytes(r['snapshot_bytes'])}"
    elif r.get("snapshot_gz_bytes") is not None:
        snap = f"no snapshot ({fmt_bytes(r['snapshot_gz_bytes'])} > cap)"
    else:
        snap = "no snapshot"
    checks = "checks ok" if r.get("checks_passed") else "CHECKS FAILED: " + ", ".join(
        r.get("checks_failed") or ["?"])
    return (f"peak alloc {fmt_bytes(r.get('max_memory_allocated')):>10}{where:<16} "
            f"reserved {fmt_bytes(r.get('max_memory_reserved')):>10}  "
            f"params {r['parameters'] / 1e6:.2f}M "
            f"(trainable {r['trainable_parameters'] / 1e6:.2f}M)  "
            f"attn {'+'.join(r.get('attention_kernels') or ['?'])}  {snap}  "
            f"sidecar {fmt_bytes(r.get('sidecar_bytes'))}  {checks}  {seconds:.1f} s")

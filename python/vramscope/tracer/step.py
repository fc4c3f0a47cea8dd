"""The fake-tensor step runner: the training loop on fake CUDA tensors, and the trace around it
(set-up, error reporting, the stream's header)."""

from __future__ import annotations

import contextlib
import os
import traceback

from .backward import BackwardExecutor
from .compiled import CompileMode, explain_compile_failure
from .common import (DEVICE, DTYPES, DataDependentError, FORMAT, TracerError, VERSION,
                     VERSION_COMPILED, VERSION_STREAMS, _one_line,
                     torch)
from .device import materialize_on_device, parameter_summary
from .distributed import apply_fsdp, construct_ddp, fake_job
from .models import ModelSpec, apply_freeze, apply_lora, load_file_model, load_hf_model
from .optimizer import build_optimizer
from .patches import GradScalerEmulation, emulation_patches
from .saved import SavedTensors
from .sdpa import SdpaRouting
from .setup import Setup
from .stream import EventWriter
from .tracking import ModuleScope, StorageTracker, _all_modes_off, _op_name


def _to_device(batch, fake_mode, tracker):
    """The batch's real CPU tensors as fake CPU tensors, then moved to the device (labelled)."""
    def move(t, name):
        if not isinstance(t, torch.Tensor):
            return t
        fake = fake_mode.from_tensor(t)
        tracker.shadows.set(fake, t)
        with tracker.label("input", name):
            return fake.to(DEVICE)

    if isinstance(batch, dict):
        return {k: move(v, str(k)) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        moved = [move(v, f"input{i}") for i, v in enumerate(batch)]
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    return move(batch, "input")


def _validate_batch(batch, where) -> None:
    tensors = list(batch.values()) if isinstance(batch, dict) else (
        list(batch) if isinstance(batch, (tuple, list)) else [batch])
    if not tensors or not any(isinstance(t, torch.Tensor) for t in tensors):
        raise TracerError("the inputs function returned no tensors", where,
                          "return a tensor, a tuple or a dict of CPU tensors")
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.device.type != "cpu":
            raise TracerError(f"the inputs function returned a tensor on {t.device}", where,
                              "return CPU tensors; the tracer moves them to the device")


def train(setup: Setup, spec: ModelSpec, tracker, fake_mode, optimizer, scope,
          compiled=None) -> None:
    """The loop of examples/training/train.py, per step: zero_grad, then per micro-batch the batch
    to the device, forward and loss (under autocast), backward; optimizer.step(); then the
    release of batch, output and loss. Earlier micro-batches' references are dropped at the end
    of their backward (as a function returning would)."""
    model = spec.model
    forward_model = compiled.compile(model) if compiled is not None else model
    amp_dtype = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}[setup.amp]
    scaler = GradScalerEmulation() if setup.amp == "fp16" else None
    try:
        with _all_modes_off():  # real CPU tensors: the inputs function may read and mask values
            cpu_batch = spec.make_batch()
    except TracerError:
        raise
    except Exception as e:
        raise TracerError(f"the inputs function failed: {type(e).__name__}: {_one_line(e)}",
                          setup.model, "fix it; it is called once, outside fake mode") from e
    _validate_batch(cpu_batch, setup.model)
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    for step in range(1, setup.steps + 1):
        if setup.zero_grad != "none":
            tracker.set_phase(step, "zero_grad")
            set_to_none = setup.zero_grad == "set-to-none"
            (optimizer or model).zero_grad(set_to_none=set_to_none)
        for micro in range(setup.grad_accum):
            tracker.set_phase(step, "inputs")
            batch = _to_device(cpu_batch, fake_mode, tracker)
            tracker.set_phase(step, "forward")
            autocast = (torch.autocast(DEVICE, dtype=amp_dtype) if amp_dtype is not None
                        else contextlib.nullcontext())
            if spec.pipeline is not None:
                # the stage's schedule runs its micro-batches' forward, loss and backward,
                # interleaved, in one call: all of it is the "forward" phase (the executor marks
                # the backward's allocations by their thread)
                spec.pipeline.cpu_batch = cpu_batch
                with autocast:
                    loss = spec.pipeline.pipeline_step(forward_model, batch)
                out = None
                if micro < setup.grad_accum - 1:
                    del batch, loss
                continue
            with autocast:
                out = spec.forward(forward_model, batch)
                loss = spec.loss(out, batch)
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise TracerError("the loss is not a scalar tensor", "the loss function",
                                  "return a scalar from vramscope_loss(output, inputs)")
            if setup.grad_accum > 1:
                loss = loss / setup.grad_accum
            tracker.set_phase(step, "backward")
            (scaler.scale_loss(loss) if scaler is not None else loss).backward()
            if micro < setup.grad_accum - 1:
                del batch, out, loss
        tracker.set_phase(step, "optimizer")
        if optimizer is not None:
            found_inf = scaler.unscale(trainable) if scaler is not None else None
            optimizer.step()
            if scaler is not None:
                scaler.update(found_inf)
                del found_inf
        tracker.set_phase(step, "step_end")
        del batch, out, loss
        scope.forget_nodes()


def _fake_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode
    # real tensors may meet fake ones (a CPU tensor a model keeps as an attribute): let fake mode
    # convert them rather than fail
    return FakeTensorMode(allow_non_fake_inputs=True)


def _data_dependent_error(e, tracker) -> TracerError:
    failure = tracker.failure or (getattr(e, "func", None), tracker.current_module(),
                                  tracker.step, tracker.phase)
    func, module, step, phase = failure
    op = _op_name(getattr(e, "func", None) or func) if (getattr(e, "func", None) or func) else "?"
    where = f"step {step} {phase}, module {module or '(outside the model)'}"
    return DataDependentError(f"the step calls {op}, whose result depends on tensor values that "
                              "fake tensors do not have", where,
                              "tracing needs shape-static code: the step must not read values "
                              "computed from parameters (.item(), .tolist(), bool(), nonzero() or "
                              "boolean-mask indexing of them)")


def trace(setup: Setup, events_path: str, hf_sees_fakes: bool = False) -> dict:
    """Run the trace; the events go to ``events_path``; returns the header. ``hf_sees_fakes``: let
    transformers know its tensors are fake (see ``emulation_patches``)."""
    def load():
        return load_hf_model(setup) if setup.model.startswith("hf:") else load_file_model(setup)

    if setup.world_size > 1:
        with fake_job(setup.world_size, setup.rank):
            fake_mode = _fake_mode()
            with fake_mode:  # FSDP2 makes small device tensors when it wraps a module: fake ones
                spec = load()
            if spec.pipeline is not None:
                with spec.pipeline.installed():
                    return _trace(setup, events_path, hf_sees_fakes, spec, fake_mode)
            return _trace(setup, events_path, hf_sees_fakes, spec, fake_mode)
    return _trace(setup, events_path, hf_sees_fakes, load(), _fake_mode())


def _trace(setup: Setup, events_path: str, hf_sees_fakes: bool, spec: ModelSpec,
           fake_mode) -> dict:
    from torch._subclasses import fake_tensor as ft

    base_class = spec.model_class
    if setup.lora is not None:
        apply_lora(spec, setup)
    if setup.freeze:
        apply_freeze(spec.model, setup.freeze)
    fsdp_units = None
    if setup.fsdp:
        with fake_mode:  # FSDP2 makes small device tensors when it wraps a module
            fsdp_units = apply_fsdp(spec.model, setup.fsdp_mp)
    model = spec.model
    param_names = {id(p): n for n, p in model.named_parameters()}

    writer = EventWriter(events_path)
    tracker = StorageTracker(writer)
    tracker.fake_mode = fake_mode
    sdpa = SdpaRouting(setup.sdpa)
    saved = SavedTensors(tracker)
    notes = [
        "tensors are FakeTensors on device cuda (torch._subclasses.FakeTensorMode): no GPU and no "
        "real memory; bytes are each storage's nbytes as PyTorch requests them (no allocator "
        "rounding, no caching)",
        "not in the stream: memory a kernel takes and returns within its call (cuBLAS/cuDNN "
        "workspaces: see the matmul and conv markers; sort buffers of embedding backward, "
        "reductions), the CUDA context, and anything the model allocates outside PyTorch",
        "backward runs in the tracer's own executor that follows PyTorch's autograd engine "
        "(its C++ engine cannot run fake CUDA tensors without a GPU); module backward hooks are "
        "not run",
    ]
    if setup.world_size > 1:
        notes.append(
            f"rank {setup.rank} of {setup.world_size}, on a fake process group (collectives "
            "return at once, their outputs allocated as on a GPU); parameters counts the whole "
            "model, parameter bytes this rank's shards; each allocation on the CUDA stream it was "
            "made on (FSDP2's all-gather copy-in and reduce-scatter streams keep their own "
            "blocks), but without the waits between streams: a block is free again when its "
            "tensor dies, not when the stream that used it gets there")
    if fsdp_units is not None:
        named = fsdp_units if len(fsdp_units) <= 4 else fsdp_units[:3] + ["..."] + fsdp_units[-1:]
        shown = ", ".join(named)
        notes.append(f"--fsdp: FSDP2 (fully_shard) over the {setup.world_size} ranks, "
                     f"{len(fsdp_units)} units: {shown}; " +
                     (f"MixedPrecisionPolicy(param_dtype={setup.fsdp_mp}, reduce_dtype=fp32)"
                      if setup.fsdp_mp else
                      "parameters all-gathered in their dtype (no MixedPrecisionPolicy)"))
    notes.extend(spec.notes)
    if spec.is_hf and hf_sees_fakes:
        notes.append("transformers was let see fake tensors (its export-safe paths: causal masks "
                     "materialised), because the step read values the tracer does not have "
                     "otherwise; a GPU run may use less memory for attention masks")
    dtype = getattr(torch, DTYPES[setup.dtype]) if setup.dtype != "fp32" else None
    if spec.pipeline is not None:  # its peers' stages are made as the traced rank's is
        spec.pipeline.fake_mode, spec.pipeline.dtype = fake_mode, dtype
    step_phase = "setup"
    try:
        with fake_mode, tracker, sdpa:
            tracker.set_phase(0, "setup")
            materialize_on_device(model, tracker, dtype)
            if setup.world_size > 1 and construct_ddp(model, tracker):
                notes.append("DistributedDataParallel emulated: the module's states broadcast "
                             "through flat copies of at most 250 MiB, one gradient bucket per "
                             "dtype, rebuilt in the forward after the first synchronised "
                             "backward (not under no_sync: a pipeline stage's is the step's "
                             "last) in the order that backward made the gradients ready (1 MiB, "
                             "then bucket_cap_mb each), as torch 2.11's "
                             "reducer allocates them; its all-reduces run in place")
            param_names = {id(p): n for n, p in model.named_parameters()}
            header_params = parameter_summary(model)
            optimizer = build_optimizer(setup, model, tracker, param_names)
            scope = ModuleScope(model)
            tracker.scope = scope
            executor = BackwardExecutor(tracker, saved, param_names, model)
            if any(m._backward_hooks or getattr(m, "_backward_pre_hooks", None)
                   for m in model.modules()):
                notes.append("the model registers module backward hooks: they were not run")
            step_phase = "training"
            compiled = (CompileMode(tracker, saved, scope.root, setup.cuda_graphs) if setup.compile
                        else None)
            try:
                with emulation_patches(executor, hf_sees_fakes,
                                       setup.compile or spec.pipeline is not None), saved.hooks():
                    train(setup, spec, tracker, fake_mode, optimizer, scope, compiled)
            finally:
                scope.close()
            tracker.recording = False  # what follows (teardown) is not part of the step
    except TracerError:
        writer.abandon()
        raise
    except (ft.DataDependentOutputException, ft.DynamicOutputShapeException) as e:
        writer.abandon()
        raise _data_dependent_error(e, tracker) from e
    except ft.UnsupportedOperatorException as e:
        writer.abandon()
        func = getattr(e, "func", None) or (tracker.failure or [None])[0]
        raise TracerError(f"operator {_op_name(func) if func else e} has no fake-tensor "
                          f"implementation", f"step {tracker.step} {tracker.phase}, module "
                          f"{(tracker.failure or [None, tracker.current_module()])[1] or '-'}",
                          "trace a model made of standard PyTorch operators") from e
    except Exception as e:
        writer.abandon()
        explained = explain_compile_failure(e) if setup.compile else None
        if explained is not None:
            raise explained from e
        if step_phase == "setup":
            where = "setting the model up on the fake device"
        else:
            module = (tracker.failure[1] if tracker.failure else tracker.current_module())
            where = f"step {tracker.step} {tracker.phase}, module {module or '(outside the model)'}"
        frame = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
        at = f" ({os.path.basename(frame.filename)}:{frame.lineno})" if frame else ""
        raise TracerError(f"{type(e).__name__}: {_one_line(e)}{at}", where,
                          "the step must run on fake CUDA tensors; if the model reads tensor "
                          "values or needs a real GPU, it cannot be traced") from e
    writer.close()

    if compiled is not None:
        notes.extend(compiled.notes())
    if spec.pipeline is not None:
        notes.extend(spec.pipeline.notes())
    if sdpa.used:
        counts = ", ".join(f"{name} x{count}" for name, count in sorted(sdpa.used.items()))
        how = (f"as torch {torch.__version__} picks on sm90" if setup.sdpa == "auto"
               else "forced")
        notes.append(f"scaled_dot_product_attention: {counts} (--sdpa {setup.sdpa}: {how})")
    if optimizer is not None:
        note = (f"optimizer: torch.optim.{type(optimizer).__name__} ({setup.optimizer_impl}) over "
                f"{len(optimizer.param_groups[0]['params'])} trainable parameter tensors")
        if setup.optimizer in ("adam", "adamw") and setup.optimizer_impl != "fused":
            note += "; its step counters are CPU tensors (not in the stream)"
        notes.append(note)
    if setup.amp == "fp16":
        notes.append("--amp fp16: GradScaler emulated op for op (scale, unscale_, update), "
                     "never skipping a step")
    if setup.grad_accum > 1:
        notes.append("grad-accum: each micro-batch's batch, output and loss are released at the "
                     "end of its backward; the last one's at step_end")
    notes.append(f"peak of the traced storages (no allocator): {tracker.peak_bytes:,} B at step "
                 f"{tracker.peak_at[0]} {tracker.peak_at[1]}" if tracker.peak_at else
                 "no allocation traced")
    producer = f"vramscope tracer (torch {torch.__version__})"
    return {
        # streams (--world-size) add a field to version 2's, compiled graphs' to version 1's
        "format": FORMAT,
        "version": (VERSION_STREAMS if setup.world_size > 1
                    else VERSION_COMPILED if setup.compile else VERSION),
        "producer": producer, "model": setup.model,
        "model_class": base_class, "setup": setup.as_header(),
        "device_emulation": "fake cuda", "parameters": header_params, "notes": notes,
        "summary": {"allocs": writer.allocs, "frees": writer.frees,
                    "peak_bytes": tracker.peak_bytes,
                    "peak_at": {"step": tracker.peak_at[0], "phase": tracker.peak_at[1]}
                    if tracker.peak_at else None},
    }

"""``predict(model=<nn.Module>)``: the user's model object traced in this process, on fake CUDA
tensors (the tracer of ``vramscope predict --model FILE.py:FUNCTION``, python/vramscope/tracer/),
into the tensor stream ``vramscope predict`` then places with its allocator model.

The module itself is never touched: a copy of it on the meta device is traced (the copy costs the
module's memory once, briefly). The batch comes from ``inputs``: a function of the batch size
returning one CPU batch (a tensor, a tuple or a dict of tensors), or such a batch itself.
"""

from __future__ import annotations

import copy
import importlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any, Callable, Optional

from .errors import UsageError

# predict's --dtype, as the tracer's parameter dtype and autocast.
_DTYPES = {"fp32": ("fp32", "none"), "bf16": ("bf16", "none"), "fp16": ("fp16", "none"),
           "bf16-amp": ("fp32", "bf16"), "fp16-amp": ("fp32", "fp16")}


def is_module(model: Any) -> bool:
    """Whether `model` is a torch.nn.Module (torch is never imported for the asking: a module
    object exists only where torch already is)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(model, torch.nn.Module)


def trace_module(module: Any, inputs: Any, folder: Path, *, batch: Optional[int],
                 seq: Optional[int], dtype: Optional[str], optimizer: Optional[str],
                 steps: Optional[int], loss: Optional[Callable[..., Any]] = None) -> Path:
    """Traces one training set-up of `module`; returns the stream file (JSON Lines)."""
    if inputs is None:
        raise UsageError("predict(model=<nn.Module>) needs inputs=: a function of the batch "
                         "size returning one CPU batch, or a batch", 2)
    if dtype is not None and dtype not in _DTYPES:
        raise UsageError(f"predict(dtype={dtype!r}): one of {', '.join(_DTYPES)}", 2)
    setup_mod = importlib.import_module(f"{__package__}.tracer.setup")
    step_mod = importlib.import_module(f"{__package__}.tracer.step")
    models = importlib.import_module(f"{__package__}.tracer.models")
    common = importlib.import_module(f"{__package__}.tracer.common")
    size = batch or 1
    param_dtype, amp = _DTYPES[dtype or "fp32"]
    out = folder / "model.jsonl"
    setup = setup_mod.Setup(model=f"{type(module).__name__} (an nn.Module traced in-process)",
                            output=str(out), batch=size, seq=seq or 512, dtype=param_dtype,
                            amp=amp, optimizer=optimizer or "adamw", steps=steps or 3)
    meta = copy.deepcopy(module).to("meta")
    make_batch = (lambda: inputs(size)) if callable(inputs) else (lambda: inputs)
    spec = models.ModelSpec(model=meta, model_class=type(module).__name__, make_batch=make_batch,
                            forward=models._default_forward, loss=loss or models._default_loss,
                            notes=["the model: an nn.Module object, traced in the caller's "
                                   "process (vramscope.predict)"])
    events = folder / "events.jsonl"
    try:
        header = step_mod._trace(setup, str(events), False, spec, step_mod._fake_mode())
    except common.TracerError as error:
        raise UsageError(f"tracing the module: {error}", 2) from None
    with open(out, "w", encoding="utf-8") as f, open(events, encoding="utf-8") as ev:
        f.write(json.dumps(header) + "\n")
        shutil.copyfileobj(ev, f)
    events.unlink()
    return out

"""vramscope's pytest plugin (registered by the ``pytest11`` entry point of ``pip install .``):
memory limits for a training step, checked on a CPU-only CI machine before a GPU job runs.

    def build():                      # module level: the tracer imports this file
        return MyModel()

    def make_batch(batch_size):       # one CPU batch: a tensor, a tuple or a dict of tensors
        return torch.randn(batch_size, 1024)

    @pytest.mark.gpu_memory(limit="12 GiB")
    def test_step_fits(vramscope_step):
        report = vramscope_step(build, make_batch, "adamw", batch=8)

``vramscope_step(model_fn, batch_fn, optimizer="adamw", *, batch=1, steps=2, loss_fn=None,
**options)`` measures the step on the GPU when CUDA is available (the real step, recorded and
reported) and predicts it without one (the tracer runs it on fake tensors through ``vramscope
predict``; ``options`` are predict's: ``dtype="bf16"``, ``gpu="h100-80gb"``...). It returns the
:class:`~vramscope.Report`, and fails the test when the ``gpu_memory`` marker's limit is below
the step's peak reserved memory (what has to fit the GPU), with the report's summary in the
failure. ``optimizer``: ``"adamw"``, ``"adam"``, ``"sgd"``, ``"momentum"``, or a callable that
makes one from the parameters (``torch.optim.AdamW``, ``lambda p: SGD(p, lr=0.1)``), whose class
names the optimizer.

Loading the plugin imports only the standard library; torch is imported when a test calls the
fixture.
"""

from __future__ import annotations

import inspect
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional, Union

import pytest

MARKER = "gpu_memory"
_OPTIMIZERS = {"AdamW": "adamw", "Adam": "adam", "SGD": "sgd"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(limit): the step vramscope_step measures (on a GPU) or predicts "
        "(without one) must reserve at most this much, e.g. limit=\"12 GiB\"")


def _bytes(limit: Union[str, int]) -> int:
    if isinstance(limit, int):
        return limit
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)?\s*", limit)
    if not m:
        raise pytest.UsageError(f"gpu_memory(limit={limit!r}): give a size such as \"12 GiB\" or "
                                "\"512MiB\", or bytes")
    scale = {"B": 1, None: 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
             "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}[m.group(2)]
    return int(float(m.group(1)) * scale)


def _optimizer_name(optimizer: Union[str, Callable[..., Any]]) -> str:
    if isinstance(optimizer, str):
        return optimizer
    import torch

    made = optimizer([torch.nn.Parameter(torch.zeros(1))])
    name = type(made).__name__
    if name == "SGD" and made.defaults.get("momentum"):
        return "momentum"
    if name not in _OPTIMIZERS:
        raise pytest.UsageError(f"vramscope_step: the optimizer {name} is not one the tracer "
                                "runs (AdamW, Adam, SGD); pass its name instead")
    return _OPTIMIZERS[name]


def _shim(model_fn: Callable[..., Any], batch_fn: Callable[..., Any],
          loss_fn: Optional[Callable[..., Any]], folder: Path) -> str:
    """A model file for the tracer (FILE.py:build, vramscope_inputs, vramscope_loss) that loads
    the functions from the test's own file: they must be module-level there."""
    for fn in (model_fn, batch_fn) + ((loss_fn,) if loss_fn else ()):
        if "<locals>" in fn.__qualname__ or fn.__name__ == "<lambda>":
            raise pytest.UsageError(f"vramscope_step: {fn.__qualname__} must be a module-level "
                                    "function (the tracer imports its file to run it)")
    source = inspect.getsourcefile(model_fn)
    if source is None or inspect.getsourcefile(batch_fn) != source:
        raise pytest.UsageError("vramscope_step: model_fn and batch_fn must be defined in one "
                                "Python file")
    loss = f"vramscope_loss = _user.{loss_fn.__name__}\n" if loss_fn else ""
    text = (
        "# Written by vramscope's pytest plugin: the step of a test, for the tracer.\n"
        "import importlib.util, sys\n"
        f"sys.path.insert(0, {str(Path(source).parent)!r})\n"
        f"_spec = importlib.util.spec_from_file_location('_vramscope_user', {source!r})\n"
        "_user = importlib.util.module_from_spec(_spec)\n"
        "_spec.loader.exec_module(_user)\n"
        f"build = _user.{model_fn.__name__}\n"
        "def vramscope_inputs(batch_size, seq_len, image_size):\n"
        f"    return _user.{batch_fn.__name__}(batch_size)\n" + loss)
    path = folder / "vramscope_step_model.py"
    path.write_text(text)
    return f"{path}:build"


def _measured(model_fn: Callable[..., Any], batch_fn: Callable[..., Any], optimizer: str,
              batch: int, steps: int, loss_fn: Optional[Callable[..., Any]],
              folder: Path) -> Any:
    """The real step on the GPU, captured in-process as `vramscope run` would (phases, names),
    then reported."""
    import torch

    from .inprocess import Capture

    kinds = {"adamw": (torch.optim.AdamW, {}), "adam": (torch.optim.Adam, {}),
             "sgd": (torch.optim.SGD, {"lr": 0.01}),
             "momentum": (torch.optim.SGD, {"lr": 0.01, "momentum": 0.9})}
    cls, kwargs = kinds[optimizer]
    with Capture(steps, folder=folder / "capture") as capture:
        model = model_fn().cuda()
        opt = cls(model.parameters(), **kwargs)
        for _ in range(steps):
            data = batch_fn(batch)
            data = (data.cuda() if isinstance(data, torch.Tensor) else
                    {k: v.cuda() for k, v in data.items()} if isinstance(data, dict) else
                    type(data)(v.cuda() for v in data))
            out = model(**data) if isinstance(data, dict) else (
                model(*data) if isinstance(data, (tuple, list)) else model(data))
            loss = loss_fn(out, data) if loss_fn else (
                out.loss if hasattr(out, "loss") else out.float().pow(2).mean())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    return capture.report(database=folder / "step.sqlite", force=True)


@pytest.fixture
def vramscope_step(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., Any]:
    """Measures (on a GPU) or predicts (without one) a training step and checks it against the
    test's ``gpu_memory`` limit; see the module's docstring."""
    marker = request.node.get_closest_marker(MARKER)
    limit = _bytes(marker.kwargs.get("limit", marker.args[0] if marker.args else 0)) \
        if marker else None

    def step(model_fn: Callable[..., Any], batch_fn: Callable[..., Any],
             optimizer: Union[str, Callable[..., Any]] = "adamw", *, batch: int = 1,
             steps: int = 2, loss_fn: Optional[Callable[..., Any]] = None,
             **options: Any) -> Any:
        from . import api

        name = _optimizer_name(optimizer)
        import torch

        if torch.cuda.is_available():
            how = "measured on " + torch.cuda.get_device_name()
            result = _measured(model_fn, batch_fn, name, batch, steps, loss_fn, tmp_path)
        else:
            how = "predicted without a GPU (vramscope predict, the tracer on fake tensors)"
            model = _shim(model_fn, batch_fn, loss_fn, tmp_path)
            result = api.predict(model, batch=batch, optimizer=name, steps=steps,
                                 python=sys.executable, database=tmp_path / "step.sqlite",
                                 force=True, **options)
        request.node.user_properties.append(("vramscope_report", str(result.database)))
        if limit is not None:
            device = result.device()
            reserved = device.peak_reserved.bytes
            if reserved > limit:
                shares = ", ".join(f"{c.category} {c.bytes / 2**20:.1f} MiB"
                                   for c in device.categories_at_peak.values() if c.bytes)
                pytest.fail(
                    f"gpu_memory: the step reserves {reserved / 2**20:,.1f} MiB "
                    f"({reserved:,} B), over the limit of {limit / 2**20:,.1f} MiB ({how}); "
                    f"peak allocated {device.peak_allocated.bytes / 2**20:,.1f} MiB in step "
                    f"{device.peak_step} ({device.peak_phase}): {shares}; the report: "
                    f"{result.database}", pytrace=False)
        return result

    return step

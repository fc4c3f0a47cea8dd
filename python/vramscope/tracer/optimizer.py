"""The optimizer of the set-up, with its state labelled ``optimizer_state``."""

from __future__ import annotations

from collections import defaultdict

from .common import OPTIMIZERS, TracerError, _one_line, torch
from .setup import Setup


class _ParamState(dict):
    """One parameter's optimizer state: a tensor stored in it is labelled at once."""

    def __init__(self, tracker, param_name):
        super().__init__()
        self._tracker, self._param_name = tracker, param_name

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        if isinstance(value, torch.Tensor):
            self._tracker.relabel(value, "optimizer_state", f"{self._param_name}.{key}")


class _LabelledState(defaultdict):
    """Replaces ``optimizer.state`` (a ``defaultdict(dict)``)."""

    def __init__(self, tracker, param_names):
        super().__init__(None)
        self._tracker, self._param_names = tracker, param_names

    def __missing__(self, param):
        state = _ParamState(self._tracker, self._param_names.get(id(param), "?"))
        self[param] = state
        return state


def build_optimizer(setup: Setup, model, tracker, param_names):
    if setup.optimizer == "none":
        return None
    cls_name, hyper = OPTIMIZERS[setup.optimizer]
    impl = {"foreach": {"foreach": True}, "fused": {"fused": True},
            "for-loop": {"foreach": False}}[setup.optimizer_impl]
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise TracerError("no parameter requires a gradient", "the model after --freeze/--lora",
                          "freeze less, or pass --optimizer none")
    try:
        optimizer = getattr(torch.optim, cls_name)(params, **hyper, **impl)
    except (TypeError, RuntimeError, ValueError) as e:
        raise TracerError(f"torch.optim.{cls_name}({setup.optimizer_impl}) cannot be made: "
                          f"{_one_line(e)}", f"torch {torch.__version__}",
                          "choose another of --foreach/--fused/--for-loop") from e
    optimizer.state = _LabelledState(tracker, param_names)
    return optimizer

"""The model put on the fake device: every parameter and buffer re-created as a fake CUDA tensor
(step 0, ``setup``)."""

from __future__ import annotations

import contextlib

from .common import DEVICE, local_shard, torch
from .tracking import StorageTracker


def materialize_on_device(model, tracker: StorageTracker | None, dtype) -> None:
    """Every parameter and buffer becomes a fake CUDA tensor (floating ones in ``dtype``, as
    ``model.to(dtype).to('cuda')`` would make them), tied ones staying tied. Done by hand:
    ``Module.to`` swaps FakeTensor parameters with ``torch.utils.swap_tensors``, which refuses
    tensors that fake mode holds weak references to. Without a tracker nothing is labelled (a
    pipeline peer's stage, outside the trace)."""
    param_names = {id(p): n for n, p in model.named_parameters()}
    buffer_names = {id(b): n for n, b in model.named_buffers()}
    memo: dict[int, object] = {}

    root = type(model).__name__

    def convert(t, category, name):
        target = dtype if (t.is_floating_point() and dtype is not None) else t.dtype
        local = local_shard(t)
        with (tracker.label(category, name, module=name.rpartition(".")[0] or root)
              if tracker is not None else contextlib.nullcontext()):
            made = torch.empty_strided(tuple(local.shape), tuple(local.stride()), dtype=target,
                                       device=DEVICE)
        if local is t:
            return made
        from torch.distributed.tensor import DTensor
        return DTensor.from_local(made, t.device_mesh, t.placements, run_check=False,
                                  shape=t.shape, stride=t.stride())

    for module in model.modules():
        for key, p in list(module._parameters.items()):
            if p is None:
                continue
            if id(p) not in memo:
                new = convert(p, "weight", param_names.get(id(p), key))
                memo[id(p)] = torch.nn.Parameter(new, requires_grad=p.requires_grad)
            module._parameters[key] = memo[id(p)]
        for key, b in list(module._buffers.items()):
            if b is None:
                continue
            if id(b) not in memo:
                memo[id(b)] = convert(b, "weight", buffer_names.get(id(b), key))
            module._buffers[key] = memo[id(b)]
        for key, value in list(vars(module).items()):  # plain tensor attributes left on meta
            if isinstance(value, torch.Tensor) and value.device.type == "meta":
                if id(value) not in memo:
                    memo[id(value)] = convert(value, "weight", key)
                setattr(module, key, memo[id(value)])


def parameter_summary(model) -> dict:
    """Parameter counts of the whole model (a sharded parameter counts all its elements) and the
    bytes this rank holds (its shards)."""
    params = list(model.parameters())

    def storage_bytes(tensors) -> int:
        seen, total = set(), 0
        for t in tensors:
            st = local_shard(t).untyped_storage()  # a sharded parameter: this rank's shard
            if id(st) not in seen:
                seen.add(id(st))
                total += st.nbytes()
        return total

    trainable = [p for p in params if p.requires_grad]
    return {"total": sum(p.numel() for p in params),
            "trainable": sum(p.numel() for p in trainable),
            "bytes": storage_bytes(params), "trainable_bytes": storage_bytes(trainable),
            "buffers_bytes": storage_bytes(list(model.buffers()))}

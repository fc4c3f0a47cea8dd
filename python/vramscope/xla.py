"""JAX: what one jitted training step holds, from XLA's own accounting, for ``vramscope report``.

    import vramscope.xla
    vramscope.xla.save_memory_analysis(train_step, params, opt_state, batch, path="step.xla.json")

``save_memory_analysis`` lowers and compiles the step for the arguments given (arrays, or
``jax.ShapeDtypeStruct`` when nothing should be allocated: the compile needs only shapes) and
writes ``compiled.memory_analysis()`` with every argument and output leaf: its pytree path, shape,
dtype, bytes, whether XLA aliases it to an output, and the category vramscope gives it. The
categories are decided here, where the pytree's types are visible (``vramscope report`` sees only
the file):

- optimizer state: a leaf inside an optax state object (a node whose class comes from
  ``optax``), or under a ``TrainState``'s ``opt_state``;
- weight: an argument whose leaves have the shapes and dtypes of a subtree of that optimizer
  state (Adam's ``mu``), a ``TrainState``'s ``params``, or, without an optimizer state, a donated
  argument (updated in place: the step's persistent state);
- input: any other argument (the batch, a random key);
- an output leaf takes the category of the argument it aliases or whose structure it repeats
  (the updated weights and state); any other output (the loss, metrics) is a temporary.

XLA reports the step's temporaries as one figure (``temp_size_in_bytes``): activations,
gradients and scratch together. The file format is versioned (``vramscope_format`` first, then
``version``); docs/design/xla-memory-analysis.md describes it.

Importing this module imports only the standard library; jax is imported when a function runs.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

FORMAT = "xla-memory-analysis"
VERSION = 1

# The fields of jax's CompiledMemoryStats that are byte counts, as written.
_STATS = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
          "temp_size_in_bytes", "generated_code_size_in_bytes", "peak_memory_in_bytes",
          "host_argument_size_in_bytes", "host_output_size_in_bytes", "host_alias_size_in_bytes",
          "host_temp_size_in_bytes", "host_generated_code_size_in_bytes")

RULES = {
    "optax_state": "a leaf inside an optax optimizer-state object",
    "train_state_opt_state": "under a TrainState's opt_state",
    "train_state_params": "under a TrainState's params",
    "matches_optimizer_state": "an argument whose leaves have the shapes and dtypes of a "
                               "subtree of the optimizer state (the weights it updates)",
    "donated": "a donated argument (updated in place by the step) and no optimizer state "
               "names it",
    "other_argument": "an argument of the step that is neither weights nor optimizer state "
                      "(the batch, a key)",
    "aliases_argument": "an output XLA writes into a donated argument's buffer",
    "repeats_argument": "an output with the structure of an argument (its new value)",
    "new_output": "an output of the step that is no argument's new value (a loss, metrics)",
}


def save_memory_analysis(fn: Any, *args: Any, path: str | os.PathLike,
                         **kwargs: Any) -> dict:
    """Compiles ``fn`` (jitted or not) for ``args``/``kwargs`` and writes its memory analysis with
    categorised leaves to ``path`` (JSON). Returns the document written."""
    document = memory_analysis(fn, *args, **kwargs)
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(document, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)  # never a half-written file at `path`
    return document


def memory_analysis(fn: Any, *args: Any, **kwargs: Any) -> dict:
    """The document ``save_memory_analysis`` writes, without writing it."""
    import jax

    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    lowered = jitted.lower(*args, **kwargs)
    compiled = lowered.compile()
    stats = compiled.memory_analysis()
    if stats is None:
        raise RuntimeError("this backend gives no memory analysis (compiled.memory_analysis() "
                           "returned None)")

    arguments = [_leaves(a, f"args[{i}]") for i, a in enumerate(args)]
    arguments += [_leaves(v, f"kwargs[{k!r}]") for k, v in kwargs.items()]
    _categorise_arguments(arguments)
    flat_args = [leaf for group in arguments for leaf in group]
    _mark_aliasing(lowered, flat_args)

    out = _leaves(lowered.out_info, "out")
    _categorise_outputs(lowered.out_info, args, arguments, out, flat_args)

    device = jax.devices()[0]
    return {
        "vramscope_format": FORMAT,
        "version": VERSION,
        "producer": {"jax": jax.__version__, "jaxlib": _jaxlib_version()},
        "backend": device.platform,
        "device_kind": device.device_kind,
        "function": getattr(fn, "__name__", None) or type(fn).__name__,
        "memory_analysis": {k: int(getattr(stats, k)) for k in _STATS if hasattr(stats, k)},
        "rules": RULES,
        "arguments": [_public(leaf) for leaf in flat_args],
        "outputs": [_public(leaf) for leaf in out],
    }


def step_peak(document: dict) -> int:
    """The bytes a step holds while it runs, as ``vramscope report`` counts them from a memory
    analysis document: every argument leaf, the temp buffer, the outputs written into no argument
    and the output tuple's index tables (``output_size_in_bytes`` beyond the leaves)."""
    stats = document["memory_analysis"]
    outputs = document["outputs"]
    leaves = sum(int(leaf["bytes"]) for leaf in outputs)
    new = sum(int(leaf["bytes"]) for leaf in outputs if leaf.get("aliases_argument") is None)
    tables = max(0, int(stats.get("output_size_in_bytes", 0)) - leaves)
    return (sum(int(leaf["bytes"]) for leaf in document["arguments"])
            + int(stats["temp_size_in_bytes"]) + new + tables)


_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}


def _budget_bytes(budget: int | str) -> int:
    if isinstance(budget, bool) or not isinstance(budget, (int, str)):
        raise TypeError(f"budget: {budget!r} is not a number of bytes or a size such as '60GiB'")
    if isinstance(budget, int):
        value = budget
    else:
        match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", budget)
        unit = match.group(2).upper() if match else None
        if unit not in _UNITS:
            raise ValueError(f"budget: {budget!r} is not a size; write it as 60GiB, 80GB or a "
                             "number of bytes")
        value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise ValueError(f"budget: {budget!r} must be more than 0 bytes")
    return value


def fit(fn: Any, args_for: Any, budget: int | str, *, start: int = 1,
        limit: int = 1 << 20) -> dict:
    """The largest batch whose step fits ``budget``, from XLA's memory analysis alone.

    ``args_for(batch)`` returns the step's arguments for a batch size (a tuple; use
    ``jax.ShapeDtypeStruct`` leaves so that nothing is allocated: only shapes are compiled).
    ``budget``: the bytes the step may use, as a number or a size (``"60GiB"``). On a GPU that is
    the memory JAX's allocator may take, which its environment decides
    (``XLA_PYTHON_CLIENT_MEM_FRACTION``, 75% of the device by default in the JAX versions that
    preallocate a fixed fraction; see JAX's "GPU memory allocation" page for yours).

    The step is compiled for ``start``, then for doubled sizes until one does not fit (or
    ``limit`` is reached), then for the sizes between by bisection: one compile per size tried.
    The peak of each is ``step_peak`` (what ``vramscope report`` gives for the document). It
    assumes the peak grows with the batch, which XLA's rematerialisation can break at the edges:
    ``tried`` has every size compiled. On the CPU a compile is not a GPU compile (fusions,
    layouts, rematerialisation, no cuBLAS or cuDNN workspaces): the answer is the CPU
    compiler's, docs/design/xla-memory-analysis.md says how far it can be.

    Returns ``{"batch": the largest size that fits (None if ``start`` does not), "peak": its
    bytes, "budget": the budget's bytes, "tried": [{"batch", "peak", "fits"}...] in the order
    compiled, "analysis": the memory analysis document of the answer (as
    ``save_memory_analysis`` writes it; None without an answer)}``.
    """
    if not callable(args_for):
        raise TypeError("args_for must be a function of the batch size returning the step's "
                        "arguments")
    if not isinstance(start, int) or not isinstance(limit, int) or not 1 <= start <= limit:
        raise ValueError(f"start={start!r}, limit={limit!r}: need whole numbers with "
                         "1 <= start <= limit")
    capacity = _budget_bytes(budget)
    tried: list[dict] = []
    documents: dict[int, dict] = {}

    def fits(batch: int) -> bool:
        args = args_for(batch)
        if not isinstance(args, tuple):
            args = (args,)
        document = memory_analysis(fn, *args)
        peak = step_peak(document)
        tried.append({"batch": batch, "peak": peak, "fits": peak <= capacity})
        if peak <= capacity:
            documents[batch] = document
        return peak <= capacity

    best = None
    too_big = None
    size = start
    while True:
        if fits(size):
            best = size
            if size == limit:
                break
            size = min(size * 2, limit)
        else:
            too_big = size
            break
    if best is not None and too_big is not None:
        lo, hi = best, too_big  # lo fits, hi does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid
        best = lo
    answer = documents.get(best) if best is not None else None
    return {"batch": best, "peak": step_peak(answer) if answer else None, "budget": capacity,
            "tried": tried, "analysis": answer}


def _jaxlib_version() -> str | None:
    try:
        import jaxlib
        return getattr(jaxlib, "__version__", None)
    except ImportError:
        return None


def _public(leaf: dict) -> dict:
    return {k: v for k, v in leaf.items() if not k.startswith("_")}


def _is_leaf(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype")


def _leaves(tree: Any, root: str) -> list[dict]:
    """The array leaves of ``tree`` in jax's flattening order, each with the classes of the
    nodes above it (for the optax rule) and its path's keys."""
    import jax

    out: list[dict] = []

    def walk(node: Any, path: str, keys: tuple, owners: tuple) -> None:
        if _is_leaf(node):
            import numpy as np
            shape = [int(d) for d in node.shape]
            dtype = np.dtype(node.dtype)
            out.append({"path": path, "shape": shape, "dtype": dtype.name,
                        "bytes": int(np.prod(shape, dtype=np.int64)) * dtype.itemsize,
                        "category": None, "rule": None,
                        "_keys": keys, "_owners": owners})
            return
        children, _ = jax.tree_util.tree_flatten_with_path(
            node, is_leaf=lambda x: x is not node)
        cls = type(node)
        owner = (cls.__module__ or "", cls.__qualname__)
        for key_path, child in children:
            key = jax.tree_util.keystr(key_path)
            walk(child, path + key, keys + (key,), owners + (owner,))

    walk(tree, root, (), ())
    return out


def _signature(leaves: list[dict]) -> list[tuple]:
    return [(tuple(l["shape"]), l["dtype"]) for l in leaves]


def _categorise_arguments(arguments: list[list[dict]]) -> None:
    state_subtrees: list[list[tuple]] = []
    for group in arguments:
        for leaf in group:
            owners = leaf["_owners"]
            for depth, (module, name) in enumerate(owners):
                key = leaf["_keys"][depth]
                if name.endswith("TrainState") and key == ".params":
                    leaf["category"], leaf["rule"] = "weight", "train_state_params"
                    break
                if name.endswith("TrainState") and key == ".opt_state":
                    leaf["category"], leaf["rule"] = "optimizer_state", "train_state_opt_state"
                    break
                if module.split(".")[0] == "optax":
                    leaf["category"], leaf["rule"] = "optimizer_state", "optax_state"
                    break
        # The subtrees of optax state objects' fields (mu, nu, trace): the weights' shapes.
        by_field: dict[tuple, list[dict]] = {}
        for leaf in group:
            if leaf["rule"] != "optax_state":
                continue
            owners = leaf["_owners"]
            for depth, (module, _) in enumerate(owners):
                if module.split(".")[0] == "optax" and depth + 1 < len(leaf["_keys"]):
                    by_field.setdefault(leaf["_keys"][:depth + 1], []).append(leaf)
        state_subtrees += [_signature(v) for v in by_field.values() if len(v) > 0]

    for group in arguments:
        undecided = [l for l in group if l["category"] is None]
        if not undecided:
            continue
        if len(undecided) == len(group) and _signature(group) in state_subtrees:
            for leaf in group:
                leaf["category"], leaf["rule"] = "weight", "matches_optimizer_state"
    for group in arguments:
        for leaf in group:
            if leaf["category"] is None:
                leaf["category"], leaf["rule"] = "input", "other_argument"


def _mark_aliasing(lowered: Any, flat_args: list[dict]) -> None:
    """Which argument leaves XLA aliases to which output leaves: StableHLO's
    ``tf.aliasing_output`` on the entry function's parameters (jit keeps one parameter per
    argument leaf unless it drops unused ones; then nothing is marked)."""
    for leaf in flat_args:
        leaf["aliased_output"] = None
    try:
        text = lowered.as_text()
    except Exception:  # noqa: BLE001 - a lowering without text: aliasing stays unknown
        return
    head = re.search(r"func\.func public @main\((.*?)\)\s*->", text, re.S)
    if head is None:
        return
    params = re.split(r",\s*(?=%arg\d+:)", head.group(1))
    if len(params) != len(flat_args):
        return
    for leaf, param in zip(flat_args, params):
        m = re.search(r"tf\.aliasing_output\s*=\s*(\d+)", param)
        if m:
            leaf["aliased_output"] = int(m.group(1))
        leaf["donated"] = bool(m) or "jax.buffer_donor" in param
    # Donated arguments no optimizer state names are the step's persistent state.
    for leaf in flat_args:
        if leaf["rule"] == "other_argument" and leaf.get("donated"):
            leaf["category"], leaf["rule"] = "weight", "donated"


def _categorise_outputs(out_info: Any, args: tuple, arguments: list[list[dict]],
                        out: list[dict], flat_args: list[dict]) -> None:
    import jax

    for leaf in out:
        leaf["aliases_argument"] = None
    for i, arg in enumerate(flat_args):
        j = arg.get("aliased_output")
        if j is not None and j < len(out):
            out[j]["aliases_argument"] = i
            out[j]["category"], out[j]["rule"] = arg["category"], "aliases_argument"
    # Outputs returned as a tuple whose elements repeat an argument's structure.
    parts = out_info if isinstance(out_info, (tuple, list)) else (out_info,)
    arg_defs = [jax.tree_util.tree_structure(a) for a in args]
    start = 0
    for part in parts:
        n = len(jax.tree_util.tree_leaves(part))
        definition = jax.tree_util.tree_structure(part)
        for k, d in enumerate(arg_defs):
            if (k < len(arguments) and d == definition and n > 0
                    and _signature(out[start:start + n]) == _signature(arguments[k])):
                for o, a in zip(out[start:start + n], arguments[k]):
                    if o["category"] is None:
                        o["category"], o["rule"] = a["category"], "repeats_argument"
                break
        start += n
    for leaf in out:
        if leaf["category"] is None:
            leaf["category"], leaf["rule"] = "temporary", "new_output"

"""JAX: the device memory profile with what each buffer is (weights, optimizer state), for
``vramscope report``.

    import vramscope.jax_memory
    vramscope.jax_memory.save_profile("memory.prof")                  # roles found by the rules
    vramscope.jax_memory.save_profile("memory.prof", weights=params,  # or named by the caller
                                      optimizer_state=opt_state)

JAX's own profile (``jax.profiler.device_memory_profile``) groups the live buffers by the stack
that made them, and after a jitted step the weights, the optimizer state and the loss all carry
the line that called the step. ``save_profile`` takes that profile and splits each of its buffer
samples into one sample per live array (``jax.live_arrays()``; per device for a sharded array),
labelled with the array's role (``unknown`` where no rule decides), the rule that decided it and
its pytree path. The file stays a
pprof profile JAX's way (the same stacks, executables and devices) that any pprof reader opens;
the labels are ``vramscope_role`` (a vramscope category name), ``vramscope_rule`` and
``vramscope_name``, and the profile's comments say what could not be decided. A sample whose
arrays do not add up to its bytes (a buffer no ``jax.Array`` owns) is kept whole and unlabelled.

The rules, first match wins (docs/design/xla-memory-analysis.md, "Roles in the profile"):

- weights / optimizer state: the pytrees passed as ``weights=`` / ``optimizer_state=``;
- optimizer state: a leaf inside an optax state object (a class from ``optax``: Adam's ``mu``,
  ``nu`` and ``count``) or under a ``TrainState``'s ``opt_state``;
- weights: the ``Param`` and ``BatchStat`` variables of a live flax ``nnx.Module`` (the modules
  no other module holds, each variable by its path: ``MLP.l1.kernel``), as PyTorch's parameters
  and buffers are; gradients and other ``nnx.State`` trees hold ``Param`` variables too, but no
  module does, so they are not weights;
- weights: a ``TrainState``'s ``params``, or the one live pytree, outside the optimizer state,
  with the structure, shapes and dtypes of an optax state's moments (``mu``: the weights it
  updates). When several do (the weights and gradients both alive), the one made by the same call
  as the moments (a jitted step returns both) is chosen; else none, and a comment says so;
- anything else is ``unknown`` (the batch, the loss, gradients and updates a loop keeps).

The step: the largest computation XLA compiled that is still alive and whose parameters all have
the shapes of live arrays (a training step's holds the weights, the optimizer state and the
batch, and its outputs repeat them) is named by one more sample of no bytes per device it runs
on, with ``kind`` ``vramscope_step``, its module's name, the stack that compiled it and XLA's
analysis of it as numeric labels (``vramscope_argument_bytes``, ``_output_``, ``_alias_``,
``_temp_``): the temp buffer holds the step's activations, gradients and scratch, which a profile
of live buffers never sees.

Objects are found with ``gc.get_objects()`` (one pass, plus one over the candidates of the
weights' search, tested on type, size and keys before any flattening), so nothing is asked of the
program. Importing this module imports only the standard library.
"""

from __future__ import annotations

import gzip
import os
from typing import Any

ROLE_KEY = "vramscope_role"
RULE_KEY = "vramscope_rule"
NAME_KEY = "vramscope_name"
STEP_KIND = "vramscope_step"  # the `kind` label of the sample that names the step

RULES = {
    "marked_weights": "passed as weights= to vramscope.jax_memory.save_profile",
    "marked_optimizer_state": "passed as optimizer_state= to vramscope.jax_memory.save_profile",
    "optax_state": "a leaf inside an optax optimizer-state object",
    "train_state_opt_state": "under a TrainState's opt_state",
    "train_state_params": "under a TrainState's params",
    "nnx_param": "a Param or BatchStat variable of a flax nnx Module",
    "matches_optimizer_state": "the live pytree with the structure, shapes and dtypes of the "
                               "optimizer state's moments (the weights it updates)",
    "none": "no rule names it (not in an optimizer state, a TrainState or the weights' pytree)",
}


def save_profile(path: str | os.PathLike, *, weights: Any = None,
                 optimizer_state: Any = None) -> dict:
    """Writes the labelled profile (gzipped pprof) to ``path``; returns ``summary()``'s dict."""
    data, summary = profile(weights=weights, optimizer_state=optimizer_state)
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return summary


def profile(*, weights: Any = None, optimizer_state: Any = None) -> tuple[bytes, dict]:
    """The labelled profile's bytes, and what it says: ``{"bytes": {role: n}, "comments":
    [...], "split_samples": n, "kept_samples": n}``."""
    import jax

    raw = jax.profiler.device_memory_profile()
    buffers = _live_buffers(jax)
    roles, comments = _roles(jax, weights, optimizer_state)
    return _labelled(raw, buffers, roles, comments, _step(jax, buffers))


def _step(jax: Any, buffers: list[tuple]) -> dict | None:
    """The step: of the computations XLA compiled that are still alive, the largest (arguments +
    outputs - aliased + temp) whose parameters all have the shape and dtype of a live array (the
    state after a training step repeats its arguments; a step compiled for arrays gone since, or
    for another model, does not). Its name, where it was compiled, its devices and XLA's analysis
    of it; None when none qualifies or jaxlib cannot say."""
    import collections

    try:
        from jax._src import xla_bridge

        executables = xla_bridge.get_backend().live_executables()
    except Exception:  # noqa: BLE001 - a jax without these internals: no step is named
        return None
    live: collections.Counter = collections.Counter()
    seen: set[int] = set()
    for array, _, _, _ in buffers:
        if id(array) in seen:
            continue
        seen.add(id(array))
        kind = _HLO_TYPES.get(str(array.dtype), str(array.dtype))
        shapes = {tuple(array.shape)}
        try:
            shapes.add(tuple(array.sharding.shard_shape(array.shape)))
        except Exception:  # noqa: BLE001 - uneven shards: the global shape only
            pass
        for shape in shapes:
            live[(kind, shape)] += 1
    candidates = []
    for exe in executables:
        try:
            stats = exe.get_compiled_memory_stats()
            sizes = {k: int(getattr(stats, f"{k}_size_in_bytes"))
                     for k in ("argument", "output", "alias", "temp")}
        except Exception:  # noqa: BLE001 - an executable without an analysis is skipped
            continue
        peak = sizes["argument"] + sizes["output"] - sizes["alias"] + sizes["temp"]
        candidates.append((peak, sizes, exe))
    for peak, sizes, exe in sorted(candidates, key=lambda c: -c[0]):
        try:
            modules = exe.hlo_modules()
            parameters = _entry_parameters(modules[0].to_string())
            devices = [str(d) for d in exe.local_devices()]
        except Exception:  # noqa: BLE001 - no text to match: not named
            continue
        wanted = collections.Counter(parameters)
        if parameters is None or any(live[p] < n for p, n in wanted.items()):
            continue
        return {"name": modules[0].name, "peak": peak, **sizes, "devices": devices,
                "frames": _frames(exe)}
    return None


# numpy's dtype names as HLO prints them.
_HLO_TYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64",
              "int8": "s8", "int16": "s16", "int32": "s32", "int64": "s64", "uint8": "u8",
              "uint16": "u16", "uint32": "u32", "uint64": "u64", "bool": "pred",
              "float8_e4m3fn": "f8e4m3fn", "float8_e5m2": "f8e5m2"}


def _entry_parameters(text: str) -> list[tuple] | None:
    """The (HLO type, dims) of each parameter of an HLO module's entry computation, from its
    `ENTRY %main (p: f32[2,3]{1,0}, ...) -> ...` line; None without one."""
    import re

    for line in text.splitlines():
        if line.startswith("ENTRY "):
            head = line.split("->", 1)[0]
            return [(kind, tuple(int(d) for d in dims.split(",") if d))
                    for kind, dims in re.findall(r":\s*(\w+)\[([\d,]*)\]", head)]
    return None


# --- what is alive, and what it is -----------------------------------------------------------

def _frames(array: Any) -> tuple:
    tb = getattr(array, "traceback", None)
    if tb is None:
        return ()
    # JAX's profile names a frame's function by its code's name, the traceback by its qualified
    # name ("Trainer.step.<locals>.loss"): the last part of that is the name.
    return tuple((f.file_name, f.function_name.rsplit(".", 1)[-1], int(f.line_num))
                 for f in tb.frames)


def _live_buffers(jax: Any) -> list[tuple]:
    """(array, device label, bytes, frames) for every device buffer of every live array."""
    out = []
    for array in jax.live_arrays():
        frames = _frames(array)
        itemsize = array.dtype.itemsize
        shards = array.addressable_shards
        if len(shards) == 1:
            out.append((array, str(shards[0].device), int(array.nbytes), frames))
            continue
        for shard in shards:
            elements = 1
            for dim, index in zip(array.shape, shard.index):
                elements *= len(range(*index.indices(dim))) if isinstance(index, slice) else 1
            out.append((array, str(shard.device), elements * itemsize, frames))
    return out


def _leaves_with_paths(jax: Any, tree: Any, prefix: str) -> list[tuple[str, Any]]:
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [(prefix + jax.tree_util.keystr(p), leaf) for p, leaf in flat
            if isinstance(leaf, jax.Array)]


def _signature(leaves: list) -> tuple:
    return tuple((tuple(leaf.shape), str(leaf.dtype)) for _, leaf in leaves)


def _kind(t: type, o: Any) -> str:
    """"optax" for an optax state's class, "train_state" for a TrainState's, "nnx_module" for a
    flax nnx Module's (its classes are known by their module, so flax is never imported here),
    else ""."""
    module = getattr(t, "__module__", None)
    name = getattr(t, "__qualname__", None)
    if isinstance(module, str) and module.split(".")[0] == "optax" and isinstance(o, tuple):
        return "optax"
    if isinstance(name, str) and name.endswith("TrainState") and hasattr(o, "params") \
            and hasattr(o, "opt_state"):
        return "train_state"
    for base in getattr(t, "__mro__", ())[1:]:
        if base.__name__ == "Module" and getattr(base, "__module__", "").startswith("flax.nnx"):
            return "nnx_module"
    return ""


def _mark_nnx_params(jax: Any, modules: list, mark_leaf: Any) -> None:
    """The Param and BatchStat variables of the live nnx Modules, by their path from the module
    that holds them (modules held by another module are reached through it)."""
    import warnings

    from flax import nnx  # there are nnx Modules, so flax is imported already

    graphs, inside = [], set()
    for module in modules:
        nodes = list(nnx.iter_graph(module))
        graphs.append((module, nodes))
        inside.update(id(node) for path, node in nodes if path and isinstance(node, nnx.Module))
    for module, nodes in graphs:
        if id(module) in inside:
            continue
        for path, node in nodes:
            if not isinstance(node, (nnx.Param, nnx.BatchStat)):
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                get = getattr(node, "get_value", None)
                value = get() if callable(get) else node.value
            if isinstance(value, jax.Array):
                name = ".".join([type(module).__name__, *(str(p) for p in path)])
                mark_leaf(value, name)


def _roles(jax: Any, weights: Any, optimizer_state: Any) -> tuple[dict, list[str]]:
    """id(array) -> (category, rule key, pytree path), and the comments for the profile."""
    import gc

    roles: dict[int, tuple[str, str, str]] = {}
    comments: list[str] = []

    def mark(tree: Any, category: str, rule: str, prefix: str) -> None:
        for path, leaf in _leaves_with_paths(jax, tree, prefix):
            roles.setdefault(id(leaf), (category, rule, path))

    if optimizer_state is not None:
        mark(optimizer_state, "optimizer_state", "marked_optimizer_state", "optimizer_state")
    if weights is not None:
        mark(weights, "weight", "marked_weights", "weights")

    # One pass over the objects the collector tracks: optax states and TrainStates.
    kinds: dict[type, str] = {}
    states, train_states, nnx_modules = [], [], []
    o = None
    for o in gc.get_objects():
        t = type(o)
        kind = kinds.get(t)
        if kind is None:
            kind = kinds[t] = _kind(t, o)
        if kind == "optax":
            states.append(o)
        elif kind == "train_state":
            train_states.append(o)
        elif kind == "nnx_module":
            nnx_modules.append(o)
    del o
    for ts in train_states:
        mark(ts.opt_state, "optimizer_state", "train_state_opt_state", "opt_state")
        mark(ts.params, "weight", "train_state_params", "params")
    # Each state under its own class's name (a chain's states are found one by one, and one
    # nested in another optax state is reached twice: an array keeps its first path).
    for state in states:
        mark(state, "optimizer_state", "optax_state", type(state).__name__)
    if nnx_modules:
        _mark_nnx_params(jax, nnx_modules, lambda leaf, name: roles.setdefault(
            id(leaf), ("weight", "nnx_param", name)))

    # The moments: the fields of optax states that are pytrees of several arrays (not a count).
    moments: dict[tuple, list] = {}
    for state in states:
        for field in state:
            leaves = _leaves_with_paths(jax, field, "")
            if len(leaves) < 1 or (len(leaves) == 1 and leaves[0][1] is field):
                continue
            treedef = jax.tree_util.tree_structure(field)
            moments.setdefault((treedef, _signature(leaves)), []).append(field)
    if moments and not any(r[1] in ("marked_weights", "train_state_params", "nnx_param")
                           for r in roles.values()):
        _mark_mirrors(jax, moments, roles, comments)
    return roles, comments


def _mark_mirrors(jax: Any, moments: dict, roles: dict, comments: list[str]) -> None:
    """Marks as weights the live pytree that repeats an optax state's moments."""
    import gc

    # Cheap tests first (the process holds many dicts): the top node's type and size (and a
    # dict's keys), then the treedef, and only then the leaves.
    def outline(node: Any) -> tuple:
        if isinstance(node, dict):
            return (type(node), len(node), frozenset(node.keys()))
        if isinstance(node, (tuple, list)):
            return (type(node), len(node))
        return (type(node),)

    outlines = {outline(f) for fields in moments.values() for f in fields}
    wanted_types = {o[0] for o in outlines}
    treedefs = {treedef for treedef, _ in moments}
    moment_ids = {id(f) for fields in moments.values() for f in fields}
    found: dict[frozenset, tuple[Any, list]] = {}
    o = None
    for o in gc.get_objects():
        if type(o) not in wanted_types or id(o) in moment_ids:
            continue
        try:
            if outline(o) not in outlines:
                continue
            treedef = jax.tree_util.tree_structure(o)
        except Exception:  # noqa: BLE001 - an object jax cannot flatten is no pytree of ours
            continue
        if treedef not in treedefs:
            continue
        leaves = _leaves_with_paths(jax, o, "")
        if not leaves or (treedef, _signature(leaves)) not in moments:
            continue
        if any(roles.get(id(leaf), ("",))[0] == "optimizer_state" for _, leaf in leaves):
            continue
        found.setdefault(frozenset(id(leaf) for _, leaf in leaves), (o, leaves))
    del o
    candidates = list(found.values())
    if len(candidates) > 1:
        # A jitted step returns the new weights and the new moments from one call.
        moment_frames = {_frames(leaf) for fields in moments.values() for f in fields
                         for _, leaf in _leaves_with_paths(jax, f, "")}
        same_call = [c for c in candidates
                     if all(_frames(leaf) in moment_frames for _, leaf in c[1])]
        if len(same_call) == 1:
            candidates = same_call
        else:
            total = sum(int(leaf.nbytes) for c in candidates for _, leaf in c[1])
            comments.append(
                f"vramscope: {len(candidates)} live pytrees have the structure, shapes and dtypes "
                f"of the optimizer state's moments ({total:,} B in all: the weights, and "
                "gradients or a copy); none is named weights. vramscope.jax_memory.save_profile("
                "path, weights=params) names them")
            return
    if candidates:
        for path, leaf in candidates[0][1]:
            roles.setdefault(id(leaf), ("weight", "matches_optimizer_state", "weights" + path))


# --- the pprof profile, read and written at the wire level -----------------------------------

def _varint(data: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        if i >= len(data) or shift > 63:
            raise ValueError("a varint runs past the end")
        b = data[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return n, i


def _fields(data: bytes):
    """(field number, wire type, value, raw encoding) of each field of one message."""
    i = 0
    while i < len(data):
        start = i
        tag, i = _varint(data, i)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 1:
            value, i = data[i:i + 8], i + 8
        elif wire == 2:
            size, i = _varint(data, i)
            value, i = data[i:i + size], i + size
        elif wire == 5:
            value, i = data[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        if i > len(data):
            raise ValueError("a field runs past the end")
        yield field, wire, value, data[start:i]


def _ints(wire: int, value: Any) -> list[int]:
    """A repeated integer field's values, packed or not."""
    if wire == 0:
        return [value]
    out, i = [], 0
    while i < len(value):
        n, i = _varint(value, i)
        out.append(n)
    return out


def _encode_varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _encode(field: int, value: int | bytes) -> bytes:
    if isinstance(value, int):
        return _encode_varint(field << 3) + _encode_varint(value)
    return _encode_varint(field << 3 | 2) + _encode_varint(len(value)) + value


class _Profile:
    """A pprof profile read at the wire level: every field but the samples kept as encoded, the
    tables a sample's stack and labels need, and the samples parsed."""

    def __init__(self, data: bytes):
        self.kept: list[bytes] = []  # the encoded fields other than samples, in order
        self.strings: list[bytes] = []
        self.functions: dict[int, tuple[int, int]] = {}  # id -> (name, file name) indices
        self.locations: dict[int, list[tuple[int, int]]] = {}  # id -> [(function id, line)]
        self.sample_types: list[tuple[int, int]] = []
        raw_samples: list[bytes] = []
        for field, _, value, encoded in _fields(data):
            if field == 2:
                raw_samples.append(value)
                continue
            self.kept.append(encoded)
            if field == 6:
                self.strings.append(bytes(value))
            elif field == 1:
                f = {k: v for k, _, v, _ in _fields(value)}
                self.sample_types.append((f.get(1, 0), f.get(2, 0)))
            elif field == 5:
                f = {k: v for k, _, v, _ in _fields(value)}
                self.functions[f.get(1, 0)] = (f.get(2, 0), f.get(4, 0))
            elif field == 4:
                lines, lid = [], 0
                for k, _, v, _ in _fields(value):
                    if k == 1:
                        lid = v
                    elif k == 4:
                        line = {kk: vv for kk, _, vv, _ in _fields(v)}
                        lines.append((line.get(1, 0), line.get(2, 0)))
                self.locations[lid] = lines
        self.index = {s: i for i, s in enumerate(self.strings)}
        self.samples = [self._sample(raw) for raw in raw_samples]

    def text(self, index: int) -> str:
        return self.strings[index].decode("utf-8", "replace") \
            if 0 <= index < len(self.strings) else ""

    def string(self, s: str) -> int:
        """The index of `s` in the string table, appended (and written) when new."""
        b = s.encode("utf-8")
        if b not in self.index:
            self.index[b] = len(self.strings)
            self.strings.append(b)
            self.kept.append(_encode(6, b))
        return self.index[b]

    def _sample(self, raw: bytes) -> dict:
        """A sample's location ids, values, encoded labels, labels by key and stack's frames
        ((file, function, line), leaf first)."""
        location_ids, values, labels, label_of = [], [], [], {}
        for k, wire, v, encoded in _fields(raw):
            if k == 1:
                location_ids += _ints(wire, v)
            elif k == 2:
                values += _ints(wire, v)
            elif k == 3:
                labels.append(encoded)
                label = {kk: vv for kk, _, vv, _ in _fields(v)}
                label_of[self.text(label.get(1, 0))] = self.text(label.get(2, 0))
        frames = []
        for lid in location_ids:
            for fid, line in self.locations.get(lid, []):
                name, file_name = self.functions.get(fid, (0, 0))
                frames.append((self.text(file_name), self.text(name), line))
        return {"raw": raw, "location_ids": location_ids, "values": values, "labels": labels,
                "label_of": label_of, "frames": tuple(frames)}


def _labelled(raw: bytes, buffers: list[tuple], roles: dict, comments: list[str],
              step: dict | None = None) -> tuple[bytes, dict]:
    p = _Profile(gzip.decompress(raw))
    names = [(p.text(t), p.text(u)) for t, u in p.sample_types]
    bytes_at = next((i for i, n in enumerate(names) if n in (("space", "bytes"),
                                                             ("inuse_space", "bytes"))), None)
    count_at = next((i for i, n in enumerate(names) if n[1] == "count"), None)
    if bytes_at is None:
        raise ValueError("JAX's profile has no sample type of space (bytes)")
    arrays_of = _arrays_of_samples(p.samples, buffers, bytes_at, count_at)

    out_samples: list[bytes] = []
    totals: dict[str, int] = {}
    split = whole = 0
    for i, sample in enumerate(p.samples):
        arrays = arrays_of.get(i)
        if not arrays:
            out_samples.append(_encode(2, sample["raw"]))
            whole += 1
            continue
        split += 1
        values = sample["values"]
        nbytes = values[bytes_at] // len(arrays)
        ids = b"".join(_encode_varint(lid) for lid in sample["location_ids"])
        for array in arrays:
            vals = [0] * len(values)
            vals[bytes_at] = nbytes
            if count_at is not None:
                vals[count_at] = 1
            body = _encode(1, ids) + _encode(2, b"".join(_encode_varint(v) for v in vals))
            body += b"".join(sample["labels"])
            category, rule, path = roles.get(id(array), ("unknown", "none", ""))
            totals[category] = totals.get(category, 0) + nbytes
            for key, value in ((ROLE_KEY, category), (RULE_KEY, RULES[rule]), (NAME_KEY, path)):
                if value:
                    body += _encode(3, _encode(1, p.string(key)) + _encode(2, p.string(value)))
            out_samples.append(_encode(2, body))
    if step is not None:
        # One sample of no bytes per device the step runs on (pprof readers add nothing), with
        # the stack that compiled it and XLA's figures as numeric labels.
        stack = next((s["location_ids"] for s in p.samples if s["frames"] == step["frames"]), [])
        ids = b"".join(_encode_varint(lid) for lid in stack)
        for device in step["devices"]:
            body = _encode(1, ids) + _encode(2, b"\0" * len(p.sample_types))
            for key, value in (("kind", STEP_KIND), ("device", device), (NAME_KEY, step["name"])):
                body += _encode(3, _encode(1, p.string(key)) + _encode(2, p.string(value)))
            for what in ("argument", "output", "alias", "temp"):
                body += _encode(3, _encode(1, p.string(f"vramscope_{what}_bytes"))
                                + _encode(3, step[what]) + _encode(4, p.string("bytes")))
            out_samples.append(_encode(2, body))
    comment_ids = [p.string(c) for c in comments]
    body = b"".join(p.kept) + b"".join(out_samples) + b"".join(_encode(13, i) for i in comment_ids)
    summary = {"bytes": totals, "comments": list(comments), "split_samples": split,
               "kept_samples": whole,
               "step": None if step is None else {k: v for k, v in step.items() if k != "frames"}}
    return gzip.compress(body, mtime=0), summary


def _arrays_of_samples(samples: list[dict], buffers: list[tuple], bytes_at: int,
                       count_at: int | None) -> dict[int, list]:
    """Sample index -> the live arrays it holds. JAX groups buffers by (stack, device, size), so
    a buffer sample is `count` buffers of bytes/count; the samples of one (device, stack, size)
    take the live arrays of that key in turn when their counts add up to them, else none."""
    groups: dict[tuple, list[int]] = {}
    counts: dict[int, int] = {}
    for i, s in enumerate(samples):
        values = s["values"]
        sample_bytes = values[bytes_at] if bytes_at < len(values) else 0
        count = values[count_at] if count_at is not None and count_at < len(values) else 1
        if s["label_of"].get("kind", "buffer") != "buffer" or count < 1 or sample_bytes % count:
            continue
        counts[i] = count
        key = (s["label_of"].get("device", ""), s["frames"], sample_bytes // count)
        groups.setdefault(key, []).append(i)
    by_key: dict[tuple, list[Any]] = {}
    for array, device, nbytes, frames in buffers:
        by_key.setdefault((device, frames, nbytes), []).append(array)
    out: dict[int, list] = {}
    for key, members in groups.items():
        arrays = by_key.get(key, [])
        if sum(counts[i] for i in members) != len(arrays):
            continue
        start = 0
        for i in members:
            out[i] = arrays[start:start + counts[i]]
            start += counts[i]
    return out

#!/usr/bin/env python3
"""Generates the data behind `vramscope predict --compile` for the built-in families:
src/predict/compiled/llama.json.gz, one template per model structure, precision and variant.

A template is the step as torch.compile(model) runs it, from the tracer (python -m
vramscope.tracer --compile, which runs Inductor's own partitioner and lowering on fake CUDA
tensors): the allocations and frees of the forward and of the backward, each split into a prefix,
one block that repeats once per layer, and a suffix, with every size a monomial of the model's
dimensions. `predict` instantiates it for any depth and size without torch.

How a template is found, for one (structure, precision):
- four traces of a real transformers model of that structure: depth 2 at three size sets whose
  dimensions are distinct primes (so each allocation's size factors into them), and depth 3 at the
  first set (the block is what depth 3 adds);
- the forward's blocks are where the modules `layers.<i>` start; the backward's (its nodes carry
  no module) are the period depth 3 adds to depth 2, placed where the two agree;
- a size is c * prod(var^e) with the same c and exponents in all three sets; the sequence may
  appear as s, s + 1 (the shifted labels) or s rounded up to 32 (the memory-efficient attention's
  log-sum-exp);
- every tensor a free names is the producer's segment, its index there, and its layer: relative
  to the block that frees it, or counted from the first or the last layer (whichever is the same
  at depths 2 and 3).
The template is then instantiated at depth 3 and compared with the trace, event for event.

    PYTHONPATH=python ~/.cache/vramscope/torch-venv/bin/python scripts/gen_compiled_templates.py
        [--only STRUCTURE/PRECISION ...] [--jobs 2]

Needs torch and transformers; nothing is downloaded. Takes about a minute per template.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "predict" / "compiled"

# Size sets: in each, every variable a distinct prime (the head dimension is 8 * d8: the fused
# attention kernels want a multiple of 8, as every real model has).
SIZE_SETS = [  # the first in the proportions of real models: its order of events is the template's
    {"b": 3, "s": 509, "kvh": 5, "g": 7, "d8": 11, "ffn": 8311, "vocab": 32009},
    {"b": 5, "s": 257, "kvh": 3, "g": 11, "d8": 13, "ffn": 9241, "vocab": 50021},
    {"b": 7, "s": 1021, "kvh": 11, "g": 3, "d8": 13, "ffn": 9257, "vocab": 28001},
]

# The LLaMA family's structures (the presets' and the common configs'): tied embeddings, q/k/v
# biases (Qwen2), grouped-query or multi-head attention.
STRUCTURES = {
    "gqa": {"tie": False, "qkv_bias": False, "gqa": True},      # LLaMA-3, Mistral, LLaMA-2-70B
    "mha": {"tie": False, "qkv_bias": False, "gqa": False},     # LLaMA-2-7B/13B
    "gqa-tied": {"tie": True, "qkv_bias": False, "gqa": True},  # LLaMA-3.2-1B/3B
    "gqa-bias": {"tie": False, "qkv_bias": True, "gqa": True},  # Qwen2-7B
    "gqa-bias-tied": {"tie": True, "qkv_bias": True, "gqa": True},  # Qwen2-0.5B/1.5B
}
PRECISIONS = {"bf16": ["--dtype", "bf16"], "bf16-amp": ["--amp", "bf16"]}
# The step as it is, or with every layer checkpointed (gradient_checkpointing_enable(), traced by
# Dynamo as a higher-order op: AOTAutograd recomputes the layer inside the backward graph).
VARIANTS = {"plain": [], "ckpt": ["--checkpointing"]}

# The sequence appears as itself, shifted by one (the labels), or rounded up to 8 (the padded
# attention mask) or to 32 (the memory-efficient attention's log-sum-exp).
SEQ_FORMS = {"s": lambda s: s, "s+1": lambda s: s + 1, "s8": lambda s: -(-s // 8) * 8,
             "s32": lambda s: -(-s // 32) * 32}
SEQ_PRODUCTS = [[]] + [[f] for f in SEQ_FORMS] + [
    [f, g] for i, f in enumerate(SEQ_FORMS) for g in list(SEQ_FORMS)[i:]]


def variables(structure: dict) -> list[str]:
    return (["b", "s", "kvh", "g", "d8", "ffn", "vocab"] if structure["gqa"]
            else ["b", "s", "heads", "d8", "ffn", "vocab"])


def config(structure: dict, sizes: dict, layers: int) -> dict:
    heads = sizes["kvh"] * sizes["g"]
    kv = sizes["kvh"] if structure["gqa"] else heads
    model_type = "qwen2" if structure["qkv_bias"] else "llama"
    return {"model_type": model_type,
            "architectures": ["Qwen2ForCausalLM" if structure["qkv_bias"] else "LlamaForCausalLM"],
            "num_hidden_layers": layers, "hidden_size": heads * sizes["d8"] * 8,
            "num_attention_heads": heads, "num_key_value_heads": kv,
            "intermediate_size": sizes["ffn"], "vocab_size": sizes["vocab"],
            "max_position_embeddings": 4096, "tie_word_embeddings": structure["tie"],
            "use_sliding_window": False}


def values(structure: dict, sizes: dict) -> dict:
    if structure["gqa"]:
        return dict(sizes)
    out = {k: v for k, v in sizes.items() if k not in ("kvh", "g")}
    out["heads"] = sizes["kvh"] * sizes["g"]
    return out


# ------------------------------------------------------------------------------------- traces


def run_tracer(python: str, structure: dict, precision: str, variant: str, sizes: dict,
               layers: int, work: Path) -> list[dict]:
    name = f"L{layers}_" + "_".join(str(v) for v in sizes.values())
    cfg, out = work / f"{name}.json", work / f"{name}.jsonl"
    text = json.dumps(config(structure, sizes, layers))
    if out.exists() and cfg.exists() and cfg.read_text() == text:  # --work: traced before
        return [json.loads(line) for line in out.read_text().splitlines()[1:]]
    cfg.write_text(text)
    cmd = [python, "-m", "vramscope.tracer", "--model", f"hf:{cfg}", "--batch",
           str(sizes["b"]), "--seq", str(sizes["s"]), "--steps", "1", "--optimizer", "adamw",
           "--compile", "-o", str(out), *PRECISIONS[precision], *VARIANTS[variant]]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"the tracer failed on {cfg}: {done.stderr.strip().splitlines()[-1:]}")
    return [json.loads(line) for line in out.read_text().splitlines()[1:]]


class Step:
    """The first step's forward and backward of a trace: events as (kind, ...) with tensors by
    id, the allocations' final category and name, and the gradients' parameters."""

    def __init__(self, events: list[dict]):
        self.forward, self.backward = [], []
        self.allocs: dict[int, dict] = {}
        phase, target = None, None
        for e in events:
            if e["ev"] == "phase":
                phase = e["phase"] if e["step"] == 1 else None
                target = {"forward": self.forward, "backward": self.backward}.get(phase)
                continue
            if target is None:
                continue
            if e["ev"] == "alloc":
                a = {"id": e["id"], "bytes": e["bytes"], "op": e.get("op", ""),
                     "module": e.get("module") or "", "category": e["category"],
                     "name": e.get("name", ""), "node": e.get("node") or "", "phase": phase}
                self.allocs[e["id"]] = a
                target.append(("alloc", a))
            elif e["ev"] == "free":
                target.append(("free", e["id"]))
            elif e["ev"] == "set" and e["id"] in self.allocs:
                self.allocs[e["id"]]["category"] = e["category"]
                self.allocs[e["id"]]["name"] = e.get("name", "")
        # The engine's gradient of the loss (ones_like) is the simulator's, not the graph's.
        first = next((i for i, (k, v) in enumerate(self.backward) if k == "alloc"), None)
        if first is not None and self.backward[first][1]["op"] == "aten::ones_like":
            seed = self.backward[first][1]["id"]
            self.backward = [(k, v) for k, v in self.backward
                             if not (k == "alloc" and v["id"] == seed)
                             and not (k == "free" and v == seed)]
        known = {v["id"] for k, v in self.forward + self.backward if k == "alloc"}
        for k, v in self.forward + self.backward:
            if k == "free" and v not in known:
                sys.exit(f"a free of tensor {v}, made outside the step's forward and backward")
        freed = {v for k, v in self.backward if k == "free"}
        self.kept = [v["id"] for k, v in self.forward if k == "alloc"
                     and v["id"] not in freed
                     and not any(kk == "free" and vv == v["id"] for kk, vv in self.forward)]


LAYER = re.compile(r"(?:^|\.)layers\.(\d+)(?=[.:]|$)")


def forward_cuts(step: Step, layers: int) -> list[int]:
    """Indices into step.forward: [start of layer 0, ..., start of layer L-1, end of L-1]."""
    starts = {}
    for i, (k, v) in enumerate(step.forward):
        if k == "alloc":
            m = LAYER.search(v["module"])
            if m and int(m.group(1)) not in starts:
                starts[int(m.group(1))] = i
    if sorted(starts) != list(range(layers)):
        sys.exit(f"the forward's blocks: found layers {sorted(starts)}")
    end = next(i for i, (k, v) in enumerate(step.forward) if i > starts[layers - 1]
               and k == "alloc" and not LAYER.search(v["module"])
               and not v["module"].startswith("G."))
    return [starts[i] for i in range(layers)] + [end]


def signature(step: Step, events: list) -> list:
    out = []
    for k, v in events:
        if k == "alloc":
            out.append(("a", v["op"], v["bytes"]))
        else:
            out.append(("f", step.allocs[v]["op"], step.allocs[v]["bytes"]))
    return out


def backward_cuts(step3: Step, step4: Step) -> list[tuple[int, int]]:
    """The (prefix length, block length) that may split the backward, from depths 3 and 4 at
    the same sizes: every place where depth 3 reads prefix, block, suffix and depth 4 prefix,
    block, block, suffix. The first and the last layer's backward differ from the others (the
    head's gradient comes in, tensors every layer shares go after the last use): they are in
    the prefix and the suffix, and the block stands for the layers between."""
    s3, s4 = signature(step3, step3.backward), signature(step4, step4.backward)
    k = len(s4) - len(s3)
    return [(p, k) for p in range(len(s3) - k + 1)
            if s4[:p] == s3[:p] and s4[p:p + k] == s4[p + k:p + 2 * k] == s3[p:p + k]
            and s4[p + 2 * k:] == s3[p + k:]]


# ------------------------------------------------------------------------------------ segments


def segments(step: Step, layers: int, bcut: tuple[int, int],
             last_in_block: bool = True) -> list[tuple[str, int, list]]:
    """[(segment, layer, events)]: the forward's prefix, blocks and suffix, then the
    backward's; a backward block's layer is the one it runs for (the last first)."""
    cuts = forward_cuts(step, layers)
    f, b = step.forward, step.backward
    # The first layer makes what all share (the attention mask): the prefix holds it, the
    # block the layers after; the last too, unless it differs (under checkpointing its forward
    # saves less): then the suffix holds it.
    last = layers if last_in_block else layers - 1
    out = [("fpre", -1, f[:cuts[1]])]
    out += [("fblk", i, f[cuts[i]:cuts[i + 1]]) for i in range(1, last)]
    out.append(("fsuf", -1, f[cuts[last]:]))
    p, k = bcut
    out.append(("bpre", -1, b[:p]))
    out += [("bblk", layers - 2 - j, b[p + j * k:p + (j + 1) * k]) for j in range(layers - 2)]
    out.append(("bsuf", -1, b[p + (layers - 2) * k:]))
    return out


def where_made(segs) -> dict[int, tuple[str, int, int]]:
    """Each allocation's (segment, layer, index among the segment's allocations)."""
    out = {}
    for seg, layer, events in segs:
        n = 0
        for k, v in events:
            if k == "alloc":
                out[v["id"]] = (seg, layer, n)
                n += 1
    return out


def reference(made, tensor: int, seg: str, layer: int, layers: int) -> list:
    """A tensor as a free names it: [segment, index, mode, layer], mode "rel" (to the naming
    block's layer), "first" or "last" (counted from that end); a non-block tensor has no layer."""
    tseg, tlayer, index = made[tensor]
    if tlayer < 0:
        return [tseg, index, "none", 0]
    if layer >= 0:
        return [tseg, index, "rel", tlayer - layer]
    return [tseg, index, "either", (tlayer, layers - 1 - tlayer)]


def sorted_frees(items: list, is_free, key) -> list:
    """Runs of frees in one order: the tracer frees what a node was the last use of in an order
    that can change with the sizes, and their order does not change what is live."""
    out, run = [], []
    for item in items + [None]:
        if item is not None and is_free(item):
            run.append(item)
            continue
        out += sorted(run, key=key)
        run = []
        if item is not None:
            out.append(item)
    return out


def ref_key(item):
    r = item[1] if len(item[1]) == 4 else item[1][4] + ["none", 0]
    return (r[0], r[1], r[2], tuple(r[3]) if isinstance(r[3], tuple) else (r[3],))


def free_every_block(items: list, blocks: int) -> list:
    """A run of frees that frees the same tensor of every forward block (autocast's casts of the
    weights, all dropped when the forward's autocast region ends) as one reference of mode
    "all": a suffix cannot list them one by one for every depth."""
    out, run = [], []
    for item in items + [None]:
        if item is not None and item[0] == "f":
            run.append(item)
            continue
        if blocks >= 1:
            per_index = {}
            for f in run:
                if f[1][0] == "fblk" and f[1][2] == "either":
                    per_index.setdefault(f[1][1], []).append(f)
            for index, frees in per_index.items():
                if len(frees) == blocks:
                    run = [f for f in run if f not in frees] + [["f", ["fblk", index, "all", 0]]]
        out += run
        run = []
        if item is not None:
            out.append(item)
    return out


def structure_of(step: Step, layers: int, bcut, last_in_block: bool = True) -> dict:
    segs = segments(step, layers, bcut, last_in_block)
    made = where_made(segs)
    out = {}
    for seg, layer, events in segs:
        if seg.endswith("blk") and layer != (1 if seg == "fblk" else layers - 2):
            continue  # one block stands for all
        items = []
        for k, v in events:
            if k == "alloc":
                items.append(["a", v])
            else:
                items.append(["f", reference(made, v, seg, layer, layers)])
        if seg == "bblk" and layers >= 4:
            # The first block's gradient comes from the prefix, the others' from the block
            # before: such a reference is the block's, with the prefix's tensor when there is no
            # block before (a fifth element).
            second = next(e for sg, ly, e in segs if sg == "bblk" and ly == layers - 3)
            for mine, (k, v) in zip(items, second):
                later = reference(made, v, "bblk", layers - 3, layers) if k == "free" else None
                if mine[0] == "f" and later and mine[1][0] == "bpre" and later[0] == "bblk" \
                        and later[2:] == ["rel", 1]:
                    mine[1] = later + [mine[1][:2]]
        if not seg.endswith("blk"):
            items = free_every_block(items, sum(1 for sg, _, _ in segs if sg == "fblk"))
        out[seg] = sorted_frees(items, lambda item: item[0] == "f", ref_key)
    out["kept"] = [reference(made, t, "fsuf", -1, layers) for t in step.kept]
    return out


def settle_either(a: dict, b: dict) -> bool:
    """Makes an "either" reference "first" or "last", whichever holds at both depths; False
    where the two structures name different tensors."""
    def refs(s):
        for seg in ("fpre", "fblk", "fsuf", "bpre", "bblk", "bsuf"):
            for item in s[seg]:
                if item[0] == "f":
                    yield item[1]
        yield from s["kept"]
    ra, rb = list(refs(a)), list(refs(b))
    if len(ra) != len(rb):
        return False
    for r, q in zip(ra, rb):
        if len(q) == 5 and r == q[4] + ["none", 0]:
            r[:] = q
            continue
        if r[2] != "either" or q[2] != "either":
            if r != q:
                return False
        elif r[3][0] == q[3][0]:
            r[2:], q[2:] = ["first", r[3][0]], ["first", q[3][0]]
        elif r[3][1] == q[3][1]:
            r[2:], q[2:] = ["last", r[3][1]], ["last", q[3][1]]
        else:
            return False
    return True


# ---------------------------------------------------------------------------------------- sizes


def factor(nbytes: int, vals: dict, forms: list[str]) -> tuple[int, dict] | None:
    """nbytes as c * prod(forms of the sequence) * prod(var^e) at these values; None where the
    forms do not divide it."""
    rest = nbytes
    for form in forms:
        value = SEQ_FORMS[form](vals["s"])
        if rest % value:
            return None
        rest //= value
    exps = {}
    for var, value in vals.items():
        e = 0
        while var != "s" and value > 1 and rest % value == 0:
            rest //= value
            e += 1
        if e:
            exps[var] = e
    return rest, exps


def fit_size(byte_counts: list[int | None], sets: list[dict], name: str) -> list:
    """[c, {var: e}, [sequence forms]] that gives every count at its sizes (None: that size set
    has no allocation to pair this one with), c a power of two."""
    for forms in SEQ_PRODUCTS:
        fits = [factor(n, v, forms) for n, v in zip(byte_counts, sets) if n is not None]
        if (fits[0] is not None and all(f == fits[0] for f in fits)
                and fits[0][0] & (fits[0][0] - 1) == 0):
            return [fits[0][0], fits[0][1], forms]
    sys.exit(f"no monomial size for {name}: {byte_counts} at {sets}")


def template_name(v: dict) -> str:
    """The tracer's name with the layer as {i}, without the root's "0." and the FX node's
    number; a free function's node (rotary embeddings) by the function's name."""
    name = v["name"] or ""
    if v["category"] == "gradient":
        return LAYER.sub(lambda m: m.group(0).replace(m.group(1), "{i}"), name)
    module, _, node = name.partition(":")
    module = module.removeprefix("0.")
    if module.startswith("G."):
        module = module.rsplit(".", 1)[-1]
    node = re.sub(r"_\d+$", "", node)
    module = LAYER.sub(lambda m: m.group(0).replace(m.group(1), "{i}"), module)
    return f"{module}:{node}" if node else module


def make_template(python: str, structure_key: str, precision: str, variant: str,
                  work: Path) -> dict:
    structure = STRUCTURES[structure_key]
    traces = [Step(run_tracer(python, structure, precision, variant, sz, 3, work))
              for sz in SIZE_SETS]
    deep = Step(run_tracer(python, structure, precision, variant, SIZE_SETS[0], 4, work))
    checks = [(t, z, 3) for t, z in zip(traces, SIZE_SETS)] + [(deep, SIZE_SETS[0], 4)]
    cuts = backward_cuts(traces[0], deep)
    if not cuts:
        sys.exit(f"{structure_key}/{precision}/{variant}: the backward does not repeat a block "
                 "per layer")
    name = f"{structure_key}/{precision}/{variant}"
    for cut, last_in_block in [(c, b) for b in (True, False) for c in cuts]:
        template = template_at(structure_key, precision, traces, deep, cut, last_in_block)
        if template:
            template["variant"] = variant
        if template and all(instantiate(template, values(structure, sz), depth)
                            == as_instantiated(step) for step, sz, depth in checks[:1] +
                            checks[3:]):
            break
    else:
        sys.exit(f"{name}: no split of the backward gives the traces at depths 3 and 4")
    # Inductor orders the backward's kernels with the sizes in view: at other sizes some frees
    # come a kernel earlier or later. The template keeps the first set's order; at the others
    # the peaks must agree within 1%.
    for step, sz, depth in checks[1:3]:
        ours = peaks(instantiate(template, values(structure, sz), depth))
        theirs = peaks(as_instantiated(step))
        for phase in ours:
            if abs(ours[phase] - theirs[phase]) > 0.01 * theirs[phase]:
                sys.exit(f"{name}: the {phase} peak at {sz} is "
                         f"{ours[phase]} B, the trace's {theirs[phase]} B")
        print(f"{name} at {sz}: peaks {ours}, traced {theirs}",
              file=sys.stderr)
    return template


def peaks(events: list[tuple]) -> dict:
    """The most bytes allocated within the forward and within the backward (counting from
    nothing), of an instantiated list."""
    size, live, phase, out = {}, 0, "forward", {"forward": 0, "backward": 0}
    for kind, value, number in events:
        if kind == "a":
            size[number] = value[0]
            live += value[0]
        elif kind == "f":
            live -= size[number]
        elif value == "backward":
            phase = "backward"
        out[phase] = max(out[phase], live)
    return out


def param_layer(seg: str, layer: int, layers: int) -> list:
    """The layer of a gradient the backward's segment `seg` makes: the prefix runs for the last
    layers, the suffix for the first, a block (representative: layers - 2) for its own."""
    if seg == "bpre":
        return ["last", layers - 1 - layer]
    if seg == "bsuf":
        return ["first", layer]
    return ["rel", layer - (layers - 2)]


def template_at(structure_key: str, precision: str, traces: list[Step], deep: Step,
                cut: tuple[int, int], last_in_block: bool = True) -> dict | None:
    """The template for one split of the backward; None where its references do not hold."""
    structure = STRUCTURES[structure_key]
    s3s = [structure_of(t, 3, cut, last_in_block) for t in traces]
    if not settle_either(s3s[0], structure_of(deep, 4, cut, last_in_block)):
        return None
    sets = [values(structure, sz) for sz in SIZE_SETS]
    # The suffix of the backward frees what the last block made: a template needs a block, so
    # three layers at least.
    template = {"structure": structure_key, "precision": precision,
                "variables": variables(structure), "min_layers": 3,
                "forward_last_in_block": last_in_block}
    sizes = {}
    for seg in ("fpre", "fblk", "fsuf", "bpre", "bblk", "bsuf"):
        # The same allocations at every size, though some come a kernel earlier or later: each
        # is paired with the first one left of its op, module and graph node at the other sizes.
        per_set = [[item for item in s[seg] if item[0] == "a"] for s in s3s]
        left = [list(allocs) for allocs in per_set[1:]]
        for i, item in enumerate(per_set[0]):
            key = (item[1]["op"], item[1]["module"], item[1]["node"])
            counts = [item[1]["bytes"]]
            for rest in left:
                match = next((j for j, x in enumerate(rest)
                              if (x[1]["op"], x[1]["module"], x[1]["node"]) == key), None)
                # Lowering's choices depend on the sizes (a sum over 3 heads is unrolled into
                # adds, over 7 it is not): an allocation only the first set makes is sized
                # from that set alone.
                counts.append(None if match is None else rest.pop(match)[1]["bytes"])
            sizes[id(item)] = fit_size(counts, sets, f"{seg} {key} #{i}")
    for seg in ("fpre", "fblk", "fsuf", "bpre", "bblk", "bsuf"):
        events = []
        for item in s3s[0][seg]:
            if item[0] == "a":
                v = item[1]
                name = template_name(v)
                alloc = {"size": sizes[id(item)], "op": v["op"], "category": v["category"]}
                if name:
                    alloc["name"] = name
                if v["category"] == "gradient" and name.endswith(".grad"):
                    alloc["param"] = name[:-len(".grad")]
                    layer = LAYER.search(v["name"])
                    if layer:  # a block's weight: its layer as the references count it
                        alloc["param_layer"] = param_layer(seg, int(layer.group(1)), 3)
                events.append(["a", alloc])
            else:
                events.append(["f", item[1]])
        template[seg] = events
    template["kept"] = s3s[0]["kept"]
    return template


# ---------------------------------------------------------------------------------- checking


def size_at(size: list, vals: dict) -> int:
    c, exps, forms = size
    n = c
    for form in forms:
        n *= SEQ_FORMS[form](vals["s"])
    for var, e in exps.items():
        n *= vals[var] ** e
    return n


def instantiate(template: dict, vals: dict, layers: int) -> list[tuple]:
    """The template at these sizes and depth, as (kind, bytes or op, allocation number) in
    order: what src/predict/compiled does, written again to check the data."""
    out, number = [], {}
    last = layers if template.get("forward_last_in_block", True) else layers - 1
    order = [("fpre", -1)] + [("fblk", i) for i in range(1, last)]
    order += [("fsuf", -1), ("bpre", -1)]
    order += [("bblk", layers - 2 - j) for j in range(layers - 2)] + [("bsuf", -1)]
    for seg, layer in order:
        n = 0
        if seg == "bpre":
            out.append(("phase", "backward", 0))
        for kind, v in template[seg]:
            if kind == "a":
                number[(seg, layer, n)] = len(number)
                out.append(("a", (size_at(v["size"], vals), param_name(v, layer, layers)),
                            number[(seg, layer, n)]))
                n += 1
            elif kind == "f" and v[2] == "all":
                out += [("f", 0, number[(v[0], at, v[1])]) for _, at in order if _ == v[0]]
            else:
                out.append(("f", 0, number[resolve(v, layer, layers)]))
    return sorted_frees(out, lambda e: e[0] == "f", lambda e: e[2])


def param_name(alloc: dict, layer: int, layers: int) -> str:
    if "param" not in alloc:
        return ""
    if "param_layer" not in alloc:
        return alloc["param"]
    mode, value = alloc["param_layer"]
    at = {"rel": layer + value, "first": value, "last": layers - 1 - value}[mode]
    return alloc["param"].replace("{i}", str(at))


def resolve(ref: list, layer: int, layers: int) -> tuple:
    seg, index, mode, value = ref[:4]
    at = {"none": -1, "rel": layer + value, "first": value, "last": layers - 1 - value}[mode]
    if len(ref) == 5 and at > layers - 2:  # no block before this one: the prefix's tensor
        return ref[4][0], -1, ref[4][1]
    return seg, at, index


def as_instantiated(step: Step) -> list[tuple]:
    out, number = [], {}
    for k, v in step.forward + [("phase", "backward")] + step.backward:
        if k == "alloc":
            number[v["id"]] = len(number)
            param = v["name"][:-len(".grad")] if v["category"] == "gradient" else ""
            out.append(("a", (v["bytes"], param), number[v["id"]]))
        elif k == "free":
            out.append(("f", 0, number[v]))
        else:
            out.append(("phase", v, 0))
    return sorted_frees(out, lambda e: e[0] == "f", lambda e: e[2])


def compact(template: dict) -> dict:
    """The template as stored: an allocation as {"s": size, "o": op, then "n": its name where it
    is an activation (what the report names), "p" and "l" where it is a parameter's gradient};
    a temporary's name and every category but these are not read."""
    out = dict(template)
    for seg in ("fpre", "fblk", "fsuf", "bpre", "bblk", "bsuf"):
        events = []
        for kind, v in template[seg]:
            if kind == "a":
                a = {"s": v["size"], "o": v["op"]}
                if v["category"] == "activation":
                    a["n"] = v.get("name", "")
                if "param" in v:
                    a["p"] = v["param"]
                    if "param_layer" in v:
                        a["l"] = v["param_layer"]
                v = a
            events.append([kind, v])
        out[seg] = events
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default=sys.executable, help="a Python with torch, transformers")
    ap.add_argument("--only", nargs="*", help="STRUCTURE/PRECISION[/VARIANT], e.g. gqa/bf16/ckpt")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--work", type=Path, help="keep the traces here (and reuse them)")
    args = ap.parse_args()
    wanted = [(s, p, v) for s in STRUCTURES for p in PRECISIONS for v in VARIANTS]
    if args.only:
        wanted = [tuple((w + "/plain").split("/")[:3]) for w in args.only]
    out_file = OUT / "llama.json.gz"
    existing = (json.loads(gzip.decompress(out_file.read_bytes())) if out_file.exists()
                else {"templates": []})
    with tempfile.TemporaryDirectory() as tmp, \
            concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {}
        for s, p, v in wanted:
            work = (args.work or Path(tmp)) / (f"{s}_{p}" + ("" if v == "plain" else f"_{v}"))
            work.mkdir(parents=True, exist_ok=True)
            futures[(s, p, v)] = pool.submit(make_template, args.python, s, p, v, work)
        made, failed = {}, []
        for key, future in futures.items():
            try:
                made[key] = future.result()
            except SystemExit as e:  # one template that cannot be made leaves the others
                failed.append(str(e.code))
    import torch
    import transformers
    made = {key: compact(t) for key, t in made.items()}
    kept = [t for t in existing["templates"]
            if (t["structure"], t["precision"], t.get("variant", "plain")) not in made]
    doc = {"generator": "scripts/gen_compiled_templates.py",
           "torch": torch.__version__, "transformers": transformers.__version__,
           "templates": sorted(kept + list(made.values()),
                               key=lambda t: (t["structure"], t["precision"],
                                              t.get("variant", "plain")))}
    OUT.mkdir(parents=True, exist_ok=True)
    # Stored gzipped (about 30 KB for 600 KB of JSON), no time stamp: the same templates make
    # the same bytes. Read it with zcat.
    text = json.dumps(doc, separators=(",", ":")) + "\n"
    out_file.write_bytes(gzip.compress(text.encode(), compresslevel=9, mtime=0))
    print(f"wrote {out_file}: {len(doc['templates'])} templates")
    for why in failed:
        print(f"not made: {why}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

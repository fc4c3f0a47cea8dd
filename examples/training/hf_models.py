#!/usr/bin/env python3
"""Training steps of real Hugging Face architectures, built offline from configs written in code.

    python3 examples/training/hf_models.py --case gpt2_b8s512_bf16amp [--device cuda] [--steps 3]
    python3 examples/training/hf_models.py --list

The suite that ``scripts/capture_hf_goldens.py`` records on a GPU: ground truth for predicting a
training step's memory from a model's config. Every model is made from a ``transformers`` config
object with random weights (``torch.manual_seed``): nothing is ever downloaded (no
``from_pretrained``; ``HF_HUB_OFFLINE=1`` is set before ``transformers`` is imported), so it runs on
a machine without network.

Contracts:

- The suite (``MODELS``, ``SUITE``, ``HFCase``) is plain data: this module imports ``torch``,
  ``transformers`` and ``peft`` only inside the functions that need them, so that listing the cases
  works anywhere.
- ``build_model`` returns the model on the CPU, in training mode, with gradient checkpointing,
  LoRA and the parameter dtype already applied; the caller moves it to the device (what a training
  script does, and what the capture measures as "setup").
- Inputs are synthetic, made on the CPU from their own generator (independent of the weights'
  randomness): token ids uniform over the vocabulary with ``labels`` a copy of them (what
  ``DataCollatorForLanguageModeling`` gives), or normal pixel values with uniform class labels.
  No attention mask is passed (every token is real). The loss is the model's own ``output.loss``.
- One step has the phases of ``examples/training/train.py`` (its ``PHASES``: zero_grad, inputs,
  forward, backward, optimizer, step_end) and calls its ``Hooks`` interface around each, so the
  capture harness measures both suites the same way.
- ``TECHNIQUE_SUITE`` (``--suite techniques`` of the capture) is the menu of memory-saving
  techniques ``vramscope predict`` models, written in plain torch on a baseline case of the
  suite: checkpointing every 2nd block, torchtitan's op-level selective checkpointing policy
  (both non-reentrant ``torch.utils.checkpoint``), and torchtune's chunked cross-entropy (the
  head over 8 chunks of the sequence, each chunk's logits upcast alone, the losses summed).
- The optimizer is ``torch.optim.AdamW(lr=1e-4)`` (PyTorch's other defaults: weight decay 0.01,
  foreach on CUDA) over the parameters that require a gradient, i.e. only the adapters with LoRA.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

TRAINING_DIR = Path(__file__).resolve().parent

DEFAULT_SEED = 0
DEFAULT_STEPS = 3
NUM_BATCHES = 3          # distinct synthetic batches, reused cyclically beyond that
LEARNING_RATE = 1e-4

# Sizes of the CPU dry run (scripts/capture_hf_goldens.py --dry-run-cpu, --tiny here): every code
# path at a fraction of the cost. Only the inputs shrink, except ViT, whose config must match the
# image (its position embeddings depend on it): that override is recorded with the case.
TINY_BATCH = 1
TINY_SEQ = 32
TINY_IMAGE = 32

# The LoRA adapter of the suite. task_type only selects peft's causal-LM wrapper class, whose
# forward passes input_ids and labels straight to the base model (no memory of its own).
LORA_KWARGS = dict(r=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")

# Forward keyword arguments for the decoders: no KV cache in training (HF would drop it anyway
# under gradient checkpointing, with a warning; saying it makes every case the same).
DECODER_FORWARD_KWARGS = {"use_cache": False}


@dataclass(frozen=True)
class ModelSpec:
    kind: str                      # "causal_lm", "masked_lm" or "image_classification"
    config_class: str              # in transformers
    model_class: str               # in transformers
    config_kwargs: dict            # what the config is built with (empty: its defaults)
    description: str
    known_parameters: int | None = None   # distinct parameters of the full-size model
    forward_kwargs: dict = field(default_factory=dict)
    lora_parameters: int | None = None    # what LORA_KWARGS adds (all of it trainable)


MODELS: dict[str, ModelSpec] = {
    "gpt2": ModelSpec(
        "causal_lm", "GPT2Config", "GPT2LMHeadModel", {},
        "GPT-2 small, GPT2Config() defaults: 12 layers, hidden 768, 12 heads, vocab 50257, "
        "1024 positions, dropout 0.1, LM head tied to the token embedding",
        known_parameters=124_439_808, forward_kwargs=DECODER_FORWARD_KWARGS),
    "llama": ModelSpec(
        "causal_lm", "LlamaConfig", "LlamaForCausalLM",
        dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
             num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
             max_position_embeddings=2048),
        "LLaMA-style decoder: 8 layers, hidden 1024, 16 heads (4 KV heads, GQA), SwiGLU 2816, "
        "vocab 32000, RMSNorm, RoPE, untied LM head",
        # embedding and LM head 2 x 32000 x 1024; per layer q, o 1024^2, k, v 1024 x 256,
        # gate/up/down 3 x 1024 x 2816, 2 norms x 1024 (11,274,240, x 8); final norm 1024
        known_parameters=155_730_944, forward_kwargs=DECODER_FORWARD_KWARGS,
        # per layer q: A 16 x 1024 + B 1024 x 16, v: A 16 x 1024 + B 256 x 16 (53,248, x 8)
        lora_parameters=425_984),
    "qwen2": ModelSpec(
        "causal_lm", "Qwen2Config", "Qwen2ForCausalLM",
        dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=6,
             num_attention_heads=14, num_key_value_heads=2, vocab_size=32000),
        "Qwen2-style decoder: 6 layers, hidden 896, 14 heads (2 KV heads, GQA), SwiGLU 4864, "
        "vocab 32000, QKV biases",
        # embedding and LM head 2 x 32000 x 896; per layer q 896^2 + 896, k, v 896 x 128 + 128,
        # o 896^2, gate/up/down 3 x 896 x 4864, 2 norms x 896 (14,912,384, x 6); final norm 896
        known_parameters=146_819_200, forward_kwargs=DECODER_FORWARD_KWARGS),
    "bert": ModelSpec(
        "masked_lm", "BertConfig", "BertForMaskedLM", {},
        "BERT-base, BertConfig() defaults: 12 layers, hidden 768, 12 heads, vocab 30522, "
        "dropout 0.1; MLM head, decoder tied to the word embedding",
        known_parameters=109_514_298),
    "vit": ModelSpec(
        "image_classification", "ViTConfig", "ViTForImageClassification", dict(num_labels=1000),
        "ViT-B/16: ViTConfig() defaults (12 layers, hidden 768, 12 heads, 224x224, patch 16) "
        "with 1000 labels; classifier on the [CLS] token, no pooler",
        known_parameters=86_567_656),
}

# name -> (short label, what it means)
PRECISIONS = {
    "fp32": ("fp32", "fp32 parameters, fp32 compute"),
    "bf16amp": ("bf16 autocast",
                "fp32 parameters, forward and loss under torch.autocast(dtype=torch.bfloat16)"),
    "bf16": ("pure bf16",
             "bf16 parameters (model.to(torch.bfloat16)), gradients and AdamW state; no autocast"),
}


@dataclass(frozen=True)
class HFCase:
    model: str                   # key of MODELS
    batch: int
    seq: int | None              # tokens per sample; None for images (the config's image_size)
    precision: str               # key of PRECISIONS
    gradient_checkpointing: bool = False
    lora: bool = False
    technique: str = ""          # key of TECHNIQUES ("": none)

    @property
    def name(self) -> str:
        size = f"b{self.batch}" + (f"s{self.seq}" if self.seq else "")
        flags = ("_gc" if self.gradient_checkpointing else "") + ("_lora" if self.lora else "")
        technique = f"_{self.technique}" if self.technique else ""
        return f"{self.model}_{size}_{self.precision}{flags}{technique}"

    @property
    def amp(self) -> str:
        """The ``train.py`` name of the autocast: "bf16" or "none"."""
        return "bf16" if self.precision == "bf16amp" else "none"


SUITE: list[HFCase] = [
    HFCase("gpt2", 8, 512, "fp32"),
    HFCase("gpt2", 8, 512, "bf16amp"),
    HFCase("gpt2", 8, 512, "bf16amp", gradient_checkpointing=True),
    HFCase("gpt2", 16, 1024, "bf16amp"),
    HFCase("llama", 4, 1024, "bf16amp"),
    HFCase("llama", 4, 1024, "bf16"),
    HFCase("llama", 4, 1024, "bf16amp", lora=True),
    HFCase("qwen2", 4, 1024, "bf16amp"),
    HFCase("bert", 16, 512, "fp32"),
    HFCase("bert", 16, 512, "bf16amp"),
    HFCase("vit", 32, None, "fp32"),
    HFCase("vit", 32, None, "bf16amp"),
]

# The memory-saving techniques of TECHNIQUE_SUITE: name -> (what it is, `vramscope predict`'s
# flags for it).
TECHNIQUES = {
    "ckpt2": ("checkpointing every 2nd block (blocks 2, 4, ...), non-reentrant",
              ["--checkpointing-every", "2"]),
    "ckptops": ("torchtitan's op-level selective checkpointing policy on every block, "
                "non-reentrant", ["--checkpointing-ops"]),
    "chunks8": ("torchtune-style chunked cross-entropy, 8 chunks", ["--loss-chunks", "8"]),
}
TECHNIQUE_SUITE: list[HFCase] = [
    HFCase(model, batch, seq, precision, technique=t)
    for model, batch, seq, precision in (("llama", 4, 1024, "bf16"), ("gpt2", 8, 512, "bf16amp"))
    for t in TECHNIQUES]

CASES: dict[str, HFCase] = {c.name: c for c in SUITE + TECHNIQUE_SUITE}


def describe_case(case: HFCase) -> str:
    spec = MODELS[case.model]
    size = f"batch {case.batch}" + (f", seq {case.seq}" if case.seq else ", 224x224 images")
    flags = (", gradient checkpointing" if case.gradient_checkpointing else "") + (
        ", LoRA r=16 on q_proj/v_proj" if case.lora else "") + (
        f", {TECHNIQUES[case.technique][0]}" if case.technique else "")
    return f"{spec.model_class}; {size}; {PRECISIONS[case.precision][0]}{flags}"


def set_offline() -> None:
    """No network: any attempt to reach the Hub fails at once instead of hanging. Must run before
    ``transformers`` (or ``huggingface_hub``) is imported, which reads these when imported."""
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ[key] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def input_sizes(case: HFCase, tiny: bool = False) -> dict:
    """Batch and sequence (or image) size the case trains with."""
    if case.seq is not None:
        return {"batch": TINY_BATCH if tiny else case.batch, "seq": TINY_SEQ if tiny else case.seq}
    return {"batch": TINY_BATCH if tiny else case.batch, "image_size": TINY_IMAGE if tiny else None}


def config_overrides(case: HFCase, tiny: bool = False) -> dict:
    """Changes to the spec's config made for the dry run (empty for the real case)."""
    if tiny and MODELS[case.model].kind == "image_classification":
        return {"image_size": TINY_IMAGE}
    return {}


def expected_parameters(case: HFCase, tiny: bool = False) -> dict | None:
    """Parameters the case's model should have (total and trainable; from published figures or
    the arithmetic above), or None where unknown or the config was changed for the dry run."""
    spec = MODELS[case.model]
    if spec.known_parameters is None or config_overrides(case, tiny):
        return None
    if case.lora:
        if spec.lora_parameters is None:
            return None
        return {"total": spec.known_parameters + spec.lora_parameters,
                "trainable": spec.lora_parameters}
    return {"total": spec.known_parameters, "trainable": spec.known_parameters}


def build_config(case: HFCase, tiny: bool = False):
    set_offline()
    import transformers

    spec = MODELS[case.model]
    kwargs = dict(spec.config_kwargs, **config_overrides(case, tiny))
    return getattr(transformers, spec.config_class)(**kwargs)


def checkpoint_settings(model) -> dict | None:
    """What gradient checkpointing was set up with: HF stores ``functools.partial(checkpoint,
    **kwargs)`` on each module that supports it. The defaults changed between versions
    (use_reentrant True, later False), hence recorded rather than assumed."""
    for module in model.modules():
        func = getattr(module, "_gradient_checkpointing_func", None)
        if func is None or not getattr(module, "gradient_checkpointing", False):
            continue
        if isinstance(func, functools.partial):
            inner = func.func
            name = getattr(inner, "__qualname__", repr(inner))
            return {"function": f"{getattr(inner, '__module__', '?')}.{name}",
                    "kwargs": {k: v if isinstance(v, (bool, int, float, str, type(None)))
                               else repr(v) for k, v in func.keywords.items()}}
        return {"function": repr(func), "kwargs": None}
    return None


def build_model(case: HFCase, seed: int = DEFAULT_SEED, tiny: bool = False):
    """The case's model on the CPU in training mode, and what was done to it (JSON-able)."""
    set_offline()
    import torch
    import transformers

    spec = MODELS[case.model]
    config = build_config(case, tiny)
    torch.manual_seed(seed)
    model = getattr(transformers, spec.model_class)(config)
    info: dict = {"hf_model_class": f"transformers.{type(model).__name__}",
                  "attn_implementation": model.config._attn_implementation,
                  "gradient_checkpointing": None, "lora": None}
    if case.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        info["gradient_checkpointing"] = {"api": "model.gradient_checkpointing_enable()",
                                          **(checkpoint_settings(model) or {"function": None})}
    if case.technique in ("ckpt2", "ckptops"):
        info["technique"] = apply_checkpointing(model, case.technique)
    if case.lora:
        import peft

        lora_config = peft.LoraConfig(**LORA_KWARGS)
        model = peft.get_peft_model(model, lora_config)  # freezes the base, adds the adapters
        info["lora"] = {"api": "peft.get_peft_model(model, peft.LoraConfig(**kwargs))",
                        "kwargs": LORA_KWARGS,
                        "peft_model_class": f"peft.{type(model).__name__}",
                        "config": {k: sorted(v) if isinstance(v, (set, frozenset)) else v
                                   for k, v in lora_config.to_dict().items()}}
    if case.precision == "bf16":
        model = model.to(torch.bfloat16)
    model.train()
    return model, info


def op_level_policy():
    """torchtitan's op-level selective checkpointing policy (selective_ac_option "op"), written
    from its description: keep the outputs of the fused attention kernels and of every aten.mm
    but every second one (counted per block, forward and recomputation apart), recompute the
    rest."""
    from collections import defaultdict

    import torch
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    aten = torch.ops.aten
    keep = {aten.mm.default}
    for name in ("_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
                 "_scaled_dot_product_cudnn_attention"):
        if hasattr(aten, name):
            keep.add(getattr(aten, name).default)

    def context():
        meta: dict = defaultdict(int)

        def decide(ctx, func, *args, **kwargs):
            key = ("recompute" if ctx.is_recompute else "forward") + "_mm_count"
            if func == aten.mm.default:
                meta[key] += 1
            kept = func in keep and not (func == aten.mm.default and meta[key] % 2 == 0)
            return CheckpointPolicy.MUST_SAVE if kept else CheckpointPolicy.PREFER_RECOMPUTE

        return create_selective_checkpoint_contexts(decide)

    return context


def apply_checkpointing(model, technique: str) -> dict:
    """Non-reentrant checkpointing through HF's per-layer switch: on every block with the op
    policy ("ckptops"), or on blocks 2, 4, ... only ("ckpt2", the others switched back off)."""
    kwargs: dict = {"use_reentrant": False}
    if technique == "ckptops":
        kwargs["context_fn"] = op_level_policy()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    blocks = [m for m in model.modules() if getattr(m, "gradient_checkpointing", None) is True
              and type(m).__name__.endswith(("Block", "DecoderLayer"))]
    if technique == "ckpt2":
        for i, block in enumerate(blocks):
            block.gradient_checkpointing = (i + 1) % 2 == 0
    return {"api": "model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=...)",
            "use_reentrant": False, "op_level_policy": technique == "ckptops",
            "checkpointed_blocks": [i for i, b in enumerate(blocks) if b.gradient_checkpointing]}


HF_CONFIG_NOTE = ("config.to_dict() of the (base) model; default id2label/label2id "
                  "(LABEL_0..LABEL_<n-1>) are replaced by num_labels, which recreates them")


def hf_config_dict(model) -> dict:
    """``config.to_dict()`` of the (base) model (a PeftModel forwards ``.config`` to it), except
    that default label maps become ``num_labels``: ViT's 1000 labels would be two thirds of the
    sidecar. ``ConfigClass(**d)`` still rebuilds the same config."""
    d = model.config.to_dict()
    id2label = d.get("id2label")
    if isinstance(id2label, dict) and all(
            str(v) == f"LABEL_{k}" for k, v in id2label.items()):
        d.pop("id2label")
        d.pop("label2id", None)
        d["num_labels"] = len(id2label)
    return d


def build_optimizer(model):
    """AdamW over the trainable parameters only (the adapters with LoRA); returns it and the
    hyperparameters given explicitly."""
    import torch

    hyper = {"lr": LEARNING_RATE}
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, **hyper), hyper


def parameter_dtype(model) -> str:
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()})
    return dtypes[0] if len(dtypes) == 1 else "mixed: " + ", ".join(dtypes)


def make_batches(case: HFCase, config, seed: int = DEFAULT_SEED, tiny: bool = False,
                 count: int = NUM_BATCHES) -> list[dict]:
    """``count`` synthetic batches on the CPU (dicts of the model's keyword arguments)."""
    import torch

    g = torch.Generator().manual_seed(seed + 1)
    sizes = input_sizes(case, tiny)
    kind = MODELS[case.model].kind
    batches = []
    for _ in range(count):
        if kind == "image_classification":
            side = config.image_size
            pixels = torch.randn(sizes["batch"], config.num_channels, side, side, generator=g)
            if case.precision == "bf16":
                pixels = pixels.to(torch.bfloat16)  # the model's dtype: no autocast to convert it
            labels = torch.randint(0, config.num_labels, (sizes["batch"],), generator=g)
            batches.append({"pixel_values": pixels, "labels": labels})
        else:
            ids = torch.randint(0, config.vocab_size, (sizes["batch"], sizes["seq"]), generator=g)
            batches.append({"input_ids": ids, "labels": ids.clone()})
    return batches


def autocast_context(device, case: HFCase):
    import torch

    if case.precision != "bf16amp":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def chunked_loss(model, batch: dict, chunks: int):
    """torchtune's chunked output and CEWithChunkedOutputLoss, written out: the final hidden
    states split along the sequence, the head over each chunk, each chunk's logits upcast to fp32
    alone and its cross-entropy summed; the logits dropped when this returns."""
    import torch.nn.functional as F

    base = model.transformer if hasattr(model, "transformer") else model.model
    hidden = base(input_ids=batch["input_ids"], **DECODER_FORWARD_KWARGS).last_hidden_state
    labels = F.pad(batch["labels"], (0, 1), value=-100)[..., 1:]
    logits = [model.lm_head(part) for part in hidden.chunk(chunks, dim=1)]
    total = None
    for part, target in zip(logits, labels.chunk(chunks, dim=1)):
        loss = F.cross_entropy(part.float().reshape(-1, part.size(-1)), target.reshape(-1),
                               reduction="sum")
        total = loss if total is None else total + loss
    return total / labels.numel()


def forward(model, batch: dict, case: HFCase, device):
    """The model's forward and its own loss, under the case's autocast (with "chunks8", the
    chunked loss, and no output: its logits are gone)."""
    with autocast_context(device, case):
        if case.technique == "chunks8":
            return None, chunked_loss(model, batch, 8)
        out = model(**batch, **MODELS[case.model].forward_kwargs)
        loss = out.loss
    return out, loss


def train_step(model, optimizer, cpu_batch: dict, case: HFCase, device, step: int, hooks) -> float:
    """One step, phase by phase as ``train.train_step``; the batch, output and loss are released
    in step_end."""
    hooks.phase_begin(step, "zero_grad")
    optimizer.zero_grad(set_to_none=True)
    hooks.phase_end(step, "zero_grad")

    hooks.phase_begin(step, "inputs")
    batch = {k: v.to(device) for k, v in cpu_batch.items()}
    hooks.phase_end(step, "inputs", dict(batch))

    hooks.phase_begin(step, "forward")
    out, loss = forward(model, batch, case, device)
    made = {"loss": loss} if out is None else {"logits": out.logits, "loss": loss}
    hooks.phase_end(step, "forward", made)

    hooks.phase_begin(step, "backward")
    loss.backward()
    hooks.phase_end(step, "backward")

    hooks.phase_begin(step, "optimizer")
    optimizer.step()
    hooks.phase_end(step, "optimizer")

    hooks.phase_begin(step, "step_end")
    value = loss.item()
    del batch, out, loss  # released here rather than at the return, inside the phase
    hooks.phase_end(step, "step_end")
    return value


def plain_training():
    """``examples/training/train.py`` (imports torch): its ``PHASES`` and ``Hooks`` are this
    suite's too."""
    if str(TRAINING_DIR) not in sys.path:
        sys.path.insert(0, str(TRAINING_DIR))
    import train as plain

    return plain


def train(model, optimizer, case: HFCase, batches, *, steps: int, device,
          hooks=None) -> list[float]:
    """Run ``steps`` training steps; returns the losses."""
    hooks = hooks or plain_training().Hooks()
    model.train()
    return [train_step(model, optimizer, batches[(step - 1) % len(batches)], case, device, step,
                       hooks) for step in range(1, steps + 1)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", choices=sorted(CASES))
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    p.add_argument("--tiny", action="store_true",
                   help=f"batch {TINY_BATCH}, seq {TINY_SEQ}, images {TINY_IMAGE}x{TINY_IMAGE}")
    args = p.parse_args(argv)
    if args.list:
        for c in SUITE + TECHNIQUE_SUITE:
            print(f"{c.name:<28} {describe_case(c)}")
        return 0
    if not args.case:
        p.error("--case is required")
    set_offline()
    import torch

    case = CASES[args.case]
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model, _ = build_model(case, args.seed, args.tiny)
    model = model.to(device)
    optimizer, _ = build_optimizer(model)
    batches = make_batches(case, model.config, args.seed, args.tiny)
    losses = train(model, optimizer, case, batches, steps=args.steps, device=device)
    print(f"{case.name}: losses {', '.join(f'{x:.4f}' for x in losses)}")
    if device.type == "cuda":
        print(f"max_memory_allocated {torch.cuda.max_memory_allocated(device):,} B, "
              f"max_memory_reserved {torch.cuda.max_memory_reserved(device):,} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())

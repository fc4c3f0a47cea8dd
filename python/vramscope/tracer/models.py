"""The user's model: a Python file's builder function or a transformers config, built on the
meta device, with LoRA and frozen parameters applied."""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import os
import sys
from dataclasses import dataclass

from .common import DTYPES, TracerError, _one_line, torch
from .pipeline import PipelinePeers
from .setup import Setup


@dataclass
class ModelSpec:
    """A model built on the meta device and how to train it."""
    model: object
    model_class: str
    make_batch: object          # () -> dict | tuple | Tensor of real CPU tensors (one batch)
    forward: object             # (model, batch) -> output
    loss: object                # (output, batch) -> scalar tensor
    notes: list
    is_hf: bool = False
    pipeline: object = None     # PipelinePeers: the file runs a torch.distributed.pipelining step


def _default_forward(model, batch):
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    return model(batch)


def _first_tensor(output):
    if isinstance(output, torch.Tensor):
        return output
    for attr in ("logits", "last_hidden_state"):
        t = getattr(output, attr, None)
        if isinstance(t, torch.Tensor):
            return t
    values = output.values() if isinstance(output, dict) else (
        output if isinstance(output, (tuple, list)) else ())
    for t in values:
        if isinstance(t, torch.Tensor):
            return t
    raise TracerError("the model's output has no tensor to make a loss of", "the default loss",
                      "define vramscope_loss(output, inputs) in the model file")


def _default_loss(output, batch):
    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    return _first_tensor(output).float().pow(2).mean()


def _load_python_file(path: str):
    if not os.path.isfile(path):
        raise TracerError(f"model file {path!r} does not exist", "--model",
                          "give FILE.py:FUNCTION with an existing file")
    directory = os.path.dirname(os.path.abspath(path))
    if directory not in sys.path:  # lets the file import its neighbours, as `python FILE.py` would
        sys.path.insert(0, directory)
    name = "vramscope_user_model_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TracerError(f"{path!r} cannot be imported as Python", "--model",
                          "give a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise TracerError(f"importing the model file failed: {type(e).__name__}: "
                          f"{_one_line(e)}", path, "fix the file so that it imports") from e
    return module


def load_file_model(setup: Setup) -> ModelSpec:
    path, sep, func_name = setup.model.rpartition(":")
    if not sep or not path or not func_name:
        raise TracerError(f"--model {setup.model!r} is neither FILE.py:FUNCTION nor hf:CONFIG.json",
                          "--model", "e.g. --model models.py:build or --model hf:config.json")
    module = _load_python_file(path)
    build = getattr(module, func_name, None)
    if not callable(build):
        raise TracerError(f"function {func_name!r} not found", path,
                          f"define {func_name}() returning an nn.Module, or name another function")
    inputs_name = setup.inputs or "vramscope_inputs"
    make_inputs = getattr(module, inputs_name, None)
    if not callable(make_inputs):
        raise TracerError(f"no inputs function {inputs_name!r}", path,
                          "define vramscope_inputs(batch_size, seq_len, image_size) returning one "
                          "CPU batch (a tuple or dict of tensors), or pass --inputs FUNCTION")
    pipeline_step = getattr(module, "vramscope_pipeline_step", None)
    pipeline = None
    if callable(pipeline_step):
        # the step of a pipeline stage (examples/distributed/train_model_file.py's convention):
        # one stage per rank of the job
        if setup.world_size < 2:
            raise TracerError("the model file runs a torch.distributed.pipelining schedule "
                              "(vramscope_pipeline_step) on one rank", path,
                              "trace one of its stages' ranks: --world-size N (the job's ranks) "
                              "and --rank R")
        if setup.compile:
            raise TracerError("--compile with a torch.distributed.pipelining stage", path,
                              "trace the stage without --compile (the tracer compiles a model's "
                              "forward, which the schedule calls per micro-batch)")
        if setup.fsdp:
            raise TracerError("--fsdp with a torch.distributed.pipelining stage", path,
                              "--fsdp shards over every rank, here the pipeline's: shard the "
                              "stages in the model file over a data-parallel mesh dimension "
                              "(examples/distributed/pp_fsdp2_gpt.py)")
        pipeline = PipelinePeers(setup.rank, setup.world_size, build, pipeline_step,
                                 f"{path}:{func_name}")
    notes = []
    with torch.device("meta"):
        try:
            model = build()
        except TracerError:
            raise
        except Exception as e:
            raise TracerError(f"building the model failed on the meta device: {type(e).__name__}: "
                              f"{_one_line(e)}", f"{path}:{func_name}",
                              "the model is built with torch.device('meta') as default device; "
                              "avoid reading tensor values in __init__") from e
    if not isinstance(model, torch.nn.Module):
        raise TracerError(f"{func_name}() returned {type(model).__name__}, not an nn.Module",
                          path, "return the model")
    if setup.checkpointing:
        notes.append("--checkpointing: a custom model checkpoints in its own forward (if it "
                     "does); nothing was switched on by the tracer")

    def make_batch():
        return make_inputs(setup.batch, setup.seq, setup.image_size or 224)

    return ModelSpec(model=model, model_class=type(model).__name__, make_batch=make_batch,
                     forward=getattr(module, "vramscope_forward", None) or _default_forward,
                     loss=getattr(module, "vramscope_loss", None) or _default_loss, notes=notes,
                     pipeline=pipeline)


def _set_hf_offline() -> None:
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ[key] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _hf_task(class_name: str) -> str:
    if class_name.endswith(("ForCausalLM", "LMHeadModel")):
        return "causal_lm"
    if class_name.endswith("ForMaskedLM"):
        return "masked_lm"
    if class_name.endswith("ForImageClassification"):
        return "image_classification"
    if class_name.endswith("ForSequenceClassification"):
        return "sequence_classification"
    return "other"


def load_hf_model(setup: Setup) -> ModelSpec:
    path = setup.model[len("hf:"):]
    if setup.inputs:
        raise TracerError("--inputs names a function of a FILE.py model", "--model hf:...",
                          "drop --inputs: a transformers model gets input_ids/labels (or images)")
    if not os.path.isfile(path):
        raise TracerError(f"config file {path!r} does not exist", "--model hf:...",
                          "give the path of a transformers config.json")
    _set_hf_offline()
    try:
        import transformers
    except ImportError as e:
        raise TracerError("transformers is not installed", "--model hf:...",
                          "install it with `pip install transformers`") from e
    transformers.logging.set_verbosity_error()  # its warnings are not the tracer's output
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError) as e:
        raise TracerError(f"cannot read the config: {_one_line(e)}", path,
                          "give a valid JSON config") from e
    if not isinstance(raw, dict) or "model_type" not in raw:
        raise TracerError("the config has no \"model_type\"", path,
                          "add \"model_type\" (e.g. \"gpt2\", \"llama\") to the JSON")
    kwargs = dict(raw)
    model_type = kwargs.pop("model_type")
    try:
        config = transformers.AutoConfig.for_model(model_type, **kwargs)
    except Exception as e:
        raise TracerError(f"transformers cannot make a config of type {model_type!r}: "
                          f"{_one_line(e)}", path, "check model_type and the fields") from e
    if setup.image_size is not None and hasattr(config, "image_size"):
        config.image_size = setup.image_size  # position embeddings follow the image size
    architectures = getattr(config, "architectures", None) or []
    cls = getattr(transformers, architectures[0], None) if architectures else None
    notes = []
    with torch.device("meta"):
        try:
            if cls is not None:
                model = cls(config)
            else:
                model = transformers.AutoModelForCausalLM.from_config(config)
        except Exception as e:
            raise TracerError(f"building the model failed: {type(e).__name__}: {_one_line(e)}",
                              path, "check the config (random weights are built on the meta "
                                    "device; nothing is downloaded)") from e
    class_name = type(model).__name__
    task = _hf_task(class_name)
    notes.append(f"transformers {transformers.__version__}: {class_name} from the config, random "
                 f"weights, attn_implementation {getattr(config, '_attn_implementation', None)}")
    if setup.checkpointing:
        if not getattr(model, "supports_gradient_checkpointing", False):
            raise TracerError(f"{class_name} does not support gradient checkpointing", path,
                              "drop --checkpointing")
        # renamed activation_checkpointing_enable in transformers 5.x; the old name warns
        enable = (getattr(model, "activation_checkpointing_enable", None)
                  or model.gradient_checkpointing_enable)
        enable()
        notes.append(f"gradient checkpointing: model.{enable.__name__}() (transformers' "
                     "defaults)")
    if setup.pack is not None and task != "causal_lm":
        raise TracerError(f"--pack packs a causal LM's samples; {class_name} is not one", path,
                          "drop --pack")
    forward_kwargs = {"use_cache": False} if task == "causal_lm" else {}
    vocab = getattr(config, "vocab_size", None)
    num_labels = getattr(config, "num_labels", 2)

    def make_batch():
        g = torch.Generator().manual_seed(1)
        b, s = setup.batch, setup.seq
        if task == "image_classification":
            side = getattr(config, "image_size", None) or setup.image_size or 224
            channels = getattr(config, "num_channels", 3)
            pixels = torch.randn(b, channels, side, side, generator=g)
            if setup.dtype != "fp32":  # the model's dtype: nothing else would convert them
                pixels = pixels.to(getattr(torch, DTYPES[setup.dtype]))
            labels = torch.randint(0, num_labels, (b,), generator=g)
            return {"pixel_values": pixels, "labels": labels}
        if vocab is None:
            raise TracerError(f"{class_name} takes neither input_ids with a vocab_size nor images",
                              path, "trace it as a FILE.py:FUNCTION model with vramscope_inputs")
        ids = torch.randint(0, vocab, (b, s), generator=g)
        if setup.pack is not None:
            # DataCollatorWithFlattening: one row, position ids restarting at every sample,
            # each sample's first label -100 (it has no previous token to predict it from)
            positions = torch.cat([torch.arange(n) for n in setup.pack]).unsqueeze(0)
            labels = ids.clone()
            labels[positions == 0] = -100
            return {"input_ids": ids, "labels": labels, "position_ids": positions}
        if task in ("causal_lm", "masked_lm"):
            return {"input_ids": ids, "labels": ids.clone()}
        if task == "sequence_classification":
            return {"input_ids": ids, "labels": torch.randint(0, num_labels, (b,), generator=g)}
        return {"input_ids": ids}

    def forward(model, batch):
        return model(**batch, **forward_kwargs)

    if setup.pack is not None:
        notes.append(f"packed: samples of {','.join(map(str, setup.pack))} tokens in one row "
                     "(position_ids restart per sample, as DataCollatorWithFlattening makes them)")
    inputs_note = {"causal_lm": "input_ids [b, s] int64 and labels (a copy)",
                   "masked_lm": "input_ids [b, s] int64 and labels (a copy: every position)",
                   "image_classification": "pixel_values [b, C, H, W] and labels [b]",
                   "sequence_classification": "input_ids [b, s] and labels [b]",
                   "other": "input_ids [b, s]"}[task]
    notes.append(f"inputs: {inputs_note}; loss: the model's own output.loss"
                 if task != "other" else f"inputs: {inputs_note}; loss: mean square of the output")
    return ModelSpec(model=model, model_class=class_name, make_batch=make_batch, forward=forward,
                     loss=_default_loss, notes=notes, is_hf=True)


def apply_lora(spec: ModelSpec, setup: Setup) -> None:
    try:
        import peft
    except ImportError as e:
        raise TracerError("--lora needs peft, which is not installed", "--lora",
                          "install it with `pip install peft`") from e
    kwargs = {"r": setup.lora}
    if setup.lora_dropout > 0:
        kwargs["lora_dropout"] = setup.lora_dropout
    if spec.is_hf and _hf_task(spec.model_class) == "causal_lm":
        kwargs["task_type"] = "CAUSAL_LM"
    try:
        config = peft.LoraConfig(**kwargs)  # target modules: peft's defaults for the model type
        with torch.device("meta"):
            spec.model = peft.get_peft_model(spec.model, config)
    except Exception as e:
        raise TracerError(f"peft could not add LoRA adapters: {_one_line(e)}", "--lora",
                          "LoRA targets are peft's defaults for the model type (llama: q_proj, "
                          "v_proj; gpt2: c_attn): use a model type peft knows") from e
    targets = sorted(config.target_modules) if config.target_modules else []
    spec.notes.append(f"LoRA: peft {peft.__version__} get_peft_model(LoraConfig(r={setup.lora}, "
                      f"lora_dropout={config.lora_dropout}, "
                      f"target_modules={targets or 'peft default'}))")


def apply_freeze(model, patterns: list) -> None:
    names = [n for n, _ in model.named_parameters()]
    for pattern in patterns:
        hits = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            raise TracerError(f"--freeze {pattern!r} matches no parameter", "--freeze",
                              f"parameter names look like {names[0]!r}" if names else
                              "the model has no parameters")
    for name, p in model.named_parameters():
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns):
            p.requires_grad_(False)

"""vramscope's verbs as Python calls: ``report``, ``simulate``, ``view``, ``predict``, ``explain``
and ``run``, each equal to its command (docs/guide/python.md lists every argument).

Each call runs the C++ core through the installed ``vramscope`` program (``_engine``) and returns
a typed result (``results``). Arguments that name an option of the command not listed in a
signature are passed through ``**options``: ``predict(model="gpt2", lora=8, zero=2)`` is
``vramscope predict --model gpt2 --lora 8 --zero 2`` (an underscore is a dash; ``True`` is the
bare flag; a list repeats the flag), and an option the command does not have is a
:class:`~vramscope.errors.UsageError`, as on the command line.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from . import _engine, traced
from .comparison import Comparison, comparison_from_json
from .errors import InputError, InternalError, UsageError
from .explanation import Explanation, explanation_from_json
from .planning import Plan, plan_from_json
from .results import Report, report_from_json
from .simulation import Simulation, simulation_from_json

PathLike = Union[str, "os.PathLike[str]"]

# What `explain` says of a text that holds no out-of-memory message.
_NO_MESSAGE = "no out-of-memory message found"

__all__ = ["report", "simulate", "view", "split", "predict", "explain", "run", "diff",
           "RunResult"]


def _flags(options: Mapping[str, Any]) -> list[str]:
    """``name=value`` keyword arguments as the command's flags (see the module's contract)."""
    args: list[str] = []
    for name, value in options.items():
        if value is None or value is False:
            continue
        # A trailing underscore keeps a Python keyword usable as a name: from_="2.5s" is --from.
        flag = "--" + name.rstrip("_").replace("_", "-")
        if value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)):
            for item in value:
                args += [flag, str(item)]
        else:
            args += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    return args


def _database_target(database: Union[PathLike, bool], scratch_name: str) -> Optional[Path]:
    """Where a call writes its report database: a given path, a private temporary file (True),
    or none (False)."""
    if database is False:
        return None
    if database is True:
        folder = Path(tempfile.mkdtemp(prefix="vramscope-"))
        return folder / scratch_name
    return Path(database)


def _own_scratch(result: Report, database: Union[PathLike, bool]) -> Report:
    """A database the call made in a temporary folder lives as long as its result: the folder is
    removed when the result is garbage-collected (or at exit)."""
    if database is True and result.database is not None:
        weakref.finalize(result, shutil.rmtree, str(result.database.parent), True)
    return result


def report(path: Optional[PathLike] = None, *, database: Union[PathLike, bool] = True,
           html: Optional[PathLike] = None, force: bool = False,
           project_root: Optional[PathLike] = None, **options: Any) -> Report:
    """The memory report of a recording: a snapshot, profiler trace, memory timeline, native
    trace or capture folder (``None``: the built-in example), as ``vramscope report``.

    ``database``: where to write the report database (default: a temporary file, kept for the
    result's ``timeline()`` and ``allocations()``; ``False``: none). ``html``: also write the
    viewer there. ``force``: replace existing outputs. Other options as the command's
    (``max_inflate_ratio=...``, ``device=...``), a window of the recording included:
    ``from_="2.5s"``, ``to=4000`` (event numbers as the report prints them, or times since the
    first event), ``step_range="5:7"``.
    """
    target = _database_target(database, "report.sqlite")
    args = ["report"] + ([os.fspath(path)] if path is not None else [])
    args += ["--json", "--quiet"]
    args += _flags({"output": target, "html": html, "force": force,
                    "project_root": project_root, **options})
    document, _ = _engine.run_json(args)
    return _own_scratch(report_from_json(document, target, Path(html) if html is not None
                                         else None), database)


def _model_argument(model: Any, scratch: Path) -> str:
    """``--model``'s value for a preset, path or Hub id, a transformers config object (written to
    ``config.json`` as ``save_pretrained`` would) or a torch ``nn.Module`` (traced in-process on
    fake tensors)."""
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model)
    if hasattr(model, "to_json_file") and hasattr(model, "model_type"):
        config_path = scratch / "config.json"
        model.to_json_file(str(config_path))
        return str(config_path)
    raise UsageError(f"predict(model=...) takes a preset name, a path, or a transformers config "
                     f"object, not {type(model).__name__}", 2)


def predict(model: Any, *, batch: Optional[int] = None, seq: Optional[int] = None,
            dtype: Optional[str] = None, optimizer: Optional[str] = None,
            gpu: Optional[str] = None, fit: Optional[str] = None,
            database: Union[PathLike, bool] = True, html: Optional[PathLike] = None,
            force: bool = False, inputs: Any = None, **options: Any) -> Report:
    """The report of training steps predicted without a GPU, as ``vramscope predict``.

    ``model``: a preset (``"gpt2"``, ``"llama3-8b"``...), a Hugging Face ``config.json`` path, a
    Hub id (``"meta-llama/Llama-3.2-1B"``, ``"org/name@revision"``: its ``config.json`` from the
    local Hugging Face cache, else downloaded by ``huggingface_hub``), a ``transformers`` config
    object, a layer list, ``"FILE.py:FUNCTION"``, a tracer stream, or a
    ``torch.nn.Module`` traced in this process on fake tensors, with ``inputs`` (a function of
    the batch size returning one CPU batch, or a batch) and ``loss`` in ``options`` (a function
    of the output and the batch; default: the output's ``loss``, else its mean square).
    ``batch``, ``seq``, ``dtype``, ``optimizer``, ``gpu``, ``fit`` and every other option
    (``checkpointing=True``, ``lora=8``, ``zero=3, world_size=8``...) as the command's, the
    memory-saving techniques included (``loss_chunks=8``, ``fused_linear_ce=True``,
    ``optimizer="adamw8bit"``, ``optimizer_in_backward=True``, ``offload_optimizer=True``,
    ``qlora=16``, ``checkpointing_ops=True``, ``fp8=True``, ``pack=[1024, 512, 2048]``,
    ``compile=True`` for the LLaMA family in bf16 or bf16-amp...):
    the prediction's facts say what each saves.
    """
    if options.get("plan") is not None:
        raise UsageError("predict(plan=...) answers with options, not a report: call "
                         "vramscope.plan(model, budget, ...)", 2)
    target = _database_target(database, "prediction.sqlite")
    with tempfile.TemporaryDirectory(prefix="vramscope-model-") as scratch:
        setup: dict[str, Any] = {"batch": batch, "seq": seq, "dtype": dtype,
                                 "optimizer": optimizer}
        if traced.is_module(model):
            if fit is not None:
                raise UsageError("predict(model=<nn.Module>, fit=...): a traced module is one "
                                 "batch size; give FILE.py:FUNCTION to fit", 2)
            stream = traced.trace_module(model, inputs, Path(scratch), steps=options.pop(
                "steps", None), loss=options.pop("loss", None), **setup)
            model, setup = stream, {}
        elif inputs is not None:
            raise UsageError("predict(inputs=...) goes with an nn.Module model", 2)
        args = ["predict", "--model", _model_argument(model, Path(scratch)), "--json", "--quiet"]
        args += _flags({**setup, "gpu": gpu, "fit": fit, "output": target, "html": html,
                        "force": force, **options})
        document, _ = _engine.run_json(args)
    return _own_scratch(report_from_json(document, target, Path(html) if html is not None
                                         else None), database)


def plan(model: str, budget: str, *, host_memory: Optional[str] = None,
         **options: Any) -> Plan:
    """The cheapest set-ups that make the step fit ``budget``, as ``vramscope predict --plan``:
    a GPU (``"rtx4090"``) or a size (``"24GiB"``), or N of them (``"8xh100-80gb"``: ZeRO/FSDP
    over 8). ``model`` and ``options`` as :func:`predict`'s (built-in families only);
    ``host_memory`` bounds what offloading may use. A plan where nothing fits is an answer, not
    an error: ``nothing_fits`` says why (``bool(plan)`` is False)."""
    args = ["predict", "--model", os.fspath(model), "--json", "--quiet"]
    args += _flags({**options, "plan": budget, "host_memory": host_memory})
    document, _ = _engine.run_json(args, ok_codes=(0, 1))
    if "plan" not in document:
        raise InternalError("vramscope predict --plan printed no plan; please report it", 3)
    return plan_from_json(document)


def simulate(path: Optional[PathLike] = None, *, capacity: Optional[str] = None,
             alloc_conf: Optional[str] = None, compare: Optional[Sequence[str]] = None,
             **options: Any) -> Simulation:
    """The allocator model's replay of a recording and its what-if runs, as
    ``vramscope simulate``: ``capacity`` (``"24GiB"``), ``alloc_conf`` (a
    ``PYTORCH_CUDA_ALLOC_CONF``), ``compare`` (several, side by side), and the command's other
    options (``gpu=``, ``memory_fraction=``, ``recorded_conf=``...)."""
    args = ["simulate"] + ([os.fspath(path)] if path is not None else [])
    args += ["--json", "--quiet"]
    args += _flags({"capacity": capacity, "alloc_conf": alloc_conf})
    for conf in compare or ():
        args += ["--compare", conf]
    args += _flags(options)
    # A what-if that runs out of memory is a result (status 0), not an error.
    document, _ = _engine.run_json(args)
    return simulation_from_json(document)


def view(path: Optional[PathLike] = None, *, output: Optional[PathLike] = None,
         compare: Optional[PathLike] = None, title: Optional[str] = None, force: bool = False,
         **options: Any) -> Path:
    """Writes the self-contained HTML viewer of a report or recording, as ``vramscope view``,
    and returns the page's path (default: the input's name with ``.html``)."""
    args = ["view"] + ([os.fspath(path)] if path is not None else []) + ["--quiet"]
    if output is None:
        folder = Path(tempfile.mkdtemp(prefix="vramscope-view-"))
        output = folder / "view.html"
    args += ["-o", os.fspath(output)]
    if compare is not None:
        args += ["--compare", os.fspath(compare)]
    if title is not None:
        args += ["--title", title]
    if force:
        args.append("--force")
    args += _flags(options)
    _engine.run_engine(args)
    return Path(output)


def split(path: Optional[PathLike], slices: int, *, output: Optional[PathLike] = None,
          force: bool = False, **options: Any) -> list[Path]:
    """Cuts a memory snapshot (``None``: the built-in example) into ``slices`` pieces that are
    snapshots themselves, as ``vramscope split``: piece i holds the i-th part of each device's
    trace and the allocator's state at its end, so PyTorch's memory_viz and :func:`report` open
    each. ``output``: their folder (default: the current directory). Returns their paths in
    order."""
    args = ["split"] + ([os.fspath(path)] if path is not None else [])
    args += ["--slices", str(slices), "--json", "--quiet"]
    if output is not None:
        args += ["-o", os.fspath(output)]
    if force:
        args.append("--force")
    args += _flags(options)
    document, _ = _engine.run_json(args)
    return [Path(piece["path"]) for piece in document["pieces"]]


def explain(text: str, **options: Any) -> Explanation:
    """What the out-of-memory messages in ``text`` (a message, a traceback or a whole log) mean,
    as ``vramscope explain``: an :class:`Explanation` whose ``messages`` is empty when the text
    holds none. Options as the command's (``alloc_conf=``, ``gpu=``, ``model=``...)."""
    if not isinstance(text, str):
        raise UsageError(f"explain() takes the text of a message or log, not "
                         f"{type(text).__name__}", 2)
    try:
        document, _ = _engine.run_json(["explain", "-", "--json", *_flags(options)], stdin=text)
    except InputError as error:
        # The command's status 1 for a text without a message: an empty answer here, so that a
        # loop over logs needs no try.
        if _NO_MESSAGE in error.message:
            return Explanation((), 0, {})
        raise
    return explanation_from_json(document)


def diff(a: PathLike, b: PathLike, *, fail_if: Optional[Sequence[str]] = None,
         device: Optional[int] = None, **options: Any) -> Comparison:
    """Two reports compared, as ``vramscope diff A B``: report databases or anything ``report``
    reads, in any mix. ``fail_if``: gates such as ``"peak_allocated > +10%"`` (the grammar is
    docs/guide/diff.md's); a crossed gate is not an exception: the result's ``failed`` is true
    (and the result is false), so that a test can ``assert vramscope.diff(...)``."""
    args = ["diff", os.fspath(a), os.fspath(b), "--json", "--quiet"]
    for gate in fail_if or ():
        args += ["--fail-if", gate]
    args += _flags({"device": device}) + _flags(options)
    # Status 1 with the document on stdout is a crossed gate; without one, an input error.
    completed = _engine.run_engine(args, ok_codes=(0, 1))
    if completed.returncode == 1 and not completed.stdout.strip():
        raise InputError(_engine.one_line(completed.stderr, 1), 1)
    try:
        document = json.loads(completed.stdout)
    except json.JSONDecodeError:
        raise InternalError("vramscope diff printed no JSON document; please report it",
                            3) from None
    return comparison_from_json(document)


class RunResult:
    """What ``run`` did: the program's exit status, the capture folder and its report (``None``
    when the program made no capture, e.g. it never used CUDA)."""

    def __init__(self, exit_code: int, folder: Path, report: Optional[Report]) -> None:
        self.exit_code = exit_code
        self.folder = folder
        self.report = report

    def __repr__(self) -> str:
        return f"RunResult(exit_code={self.exit_code}, folder={str(self.folder)!r})"


def run(command: Sequence[str], *, output: Optional[PathLike] = None,
        steps: Optional[int] = None, force: bool = False, **options: Any) -> RunResult:
    """Runs a training command unchanged and captures its GPU memory, as ``vramscope run``
    (``native=True``, ``stacks="all"``, ``phase_memory=True``... as the command's). The
    program's output goes where this process's goes. A program that fails (an out-of-memory
    error included) is not an exception: ``exit_code`` says it, and the report holds what it
    captured."""
    if isinstance(command, str) or not command:
        raise UsageError("run() takes the command as a list of arguments, e.g. "
                         "['python', 'train.py']", 2)
    folder = Path(output) if output is not None else Path(tempfile.mkdtemp(prefix="vramscope-run-"))
    args = ["run", "-o", str(folder), "--no-report"]
    if output is None or force:
        args.append("--force")
    args += _flags({"steps": steps}) + _flags(options) + ["--", *command]
    exit_code = _engine.run_passthrough(args)
    captured = any(any(folder.glob(f"*{suffix}"))
                   for suffix in (".pickle", ".vstrace", ".jax.prof", ".xplane.pb"))
    if not captured:
        if exit_code == 2:
            raise UsageError("vramscope run refused its arguments (see the message above)", 2)
        return RunResult(exit_code, folder, None)
    return RunResult(exit_code, folder, report(folder, database=folder / "report.sqlite",
                                               force=True))

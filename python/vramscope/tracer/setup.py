"""The training set-up the command line describes (the stream's header carries it)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Setup:
    model: str
    output: str
    inputs: str | None = None
    batch: int = 1
    seq: int = 512
    image_size: int | None = None
    dtype: str = "fp32"
    amp: str = "none"
    optimizer: str = "adamw"
    optimizer_impl: str = "foreach"
    zero_grad: str = "set-to-none"
    steps: int = 3
    grad_accum: int = 1
    checkpointing: bool = False
    lora: int | None = None
    lora_dropout: float = 0.0   # --lora-dropout: LoraConfig(lora_dropout=...)
    freeze: list = field(default_factory=list)
    sdpa: str = "auto"
    compile: bool = False       # torch.compile (Inductor's graphs and partitioner)
    cuda_graphs: bool = False   # mode="reduce-overhead": CUDA graphs, their private pool
    world_size: int = 1         # --world-size: one rank of a job on a fake process group
    rank: int = 0
    fsdp: bool = False          # --fsdp: FSDP2 applied by the tracer (blocks, then the root)
    fsdp_mp: str | None = None  # --fsdp-mp bf16|fp16: its MixedPrecisionPolicy
    pack: list | None = None    # --pack: sample lengths packed into one row (causal LMs)

    def as_header(self) -> dict:
        d = dict(self.__dict__)
        d.pop("output")
        return d



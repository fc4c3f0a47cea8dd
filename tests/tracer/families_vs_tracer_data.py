"""The built-in families against the tracer, as data: the cases compared and every open class of
difference between the two streams, with its cause and the exact number of entries it accounts
for in each case. tests/tracer/families_vs_tracer.py does the comparison (its code recognises
each class's entries by key) and tests/tracer/test_families_vs_tracer.py asserts that every case
comes out exactly as written here; the generated section of docs/accuracy.md is made from the
same data (scripts/families_vs_tracer.py --write docs/accuracy.md).

Each case's config is traced (``python -m vramscope.tracer --model hf:config.json``) and
predicted (``vramscope predict --model config.json --emit-stream``) with the same batch,
sequence, dtype, optimizer (AdamW) and number of steps.

A class (``KNOWN``):

- ``key``, ``title``, ``why``: the difference and its cause, checked in the transformers or
  PyTorch sources or in the tracer.
- ``verdict``: FAMILY_BUG (the family is wrong), TRACER (the tracer is: the family is right),
  NOT_MODELLED (what the family leaves out on purpose, or what the tracer cannot see).
- ``effect``: for a family bug, its measured effect on the H200 goldens.
- ``counts``: the cases the class applies to, and for each the entries it accounts for, as
  "<category>/<side>": n — per step for gradients, activations and temporaries (both steps
  alike), in all for weights and optimizer state; "lifetime": 1 where its difference is a
  lifetime (same tensors, freed at another time) and shows. A case with {} is one where the class
  applies and accounts for nothing. A class accounts for exactly these counts, in every case,
  or the test fails: more, fewer, or none at all.

Only open classes are here. A class whose difference is fixed (in the family, or in the tracer
for a tracer artifact) is taken out, data and recogniser, and its history (what it was, the
cause, the fix and the commit) goes to docs/accuracy.md, under "Differences fixed since", outside
the generated section. Should the old behaviour come back, no class recognises it any more: its
entries show as unexplained (or move an open class's count), and the test fails.
"""

BATCH, SEQ, STEPS = 2, 48, 2  # 96 token rows: no size coincides with hidden (128) by chance

CONFIGS = {
    "gpt2": {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2,
             "n_embd": 128, "n_head": 4, "vocab_size": 1000, "n_positions": 128},
    "llama": {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
              "num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 352, "vocab_size": 1000,
              "max_position_embeddings": 256},
    "qwen2": {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"],
              "num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 352, "vocab_size": 1000,
              "max_position_embeddings": 256},
    "bert": {"model_type": "bert", "architectures": ["BertForMaskedLM"], "num_hidden_layers": 2,
             "hidden_size": 128, "num_attention_heads": 4, "intermediate_size": 512,
             "vocab_size": 1000, "max_position_embeddings": 128},
    "vit": {"model_type": "vit", "architectures": ["ViTForImageClassification"],
            "num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 4,
            "intermediate_size": 512, "image_size": 32, "patch_size": 8, "num_labels": 10},
}

# variant -> (tracer flags, predict flags)
VARIANTS = {
    "fp32": ([], ["--dtype", "fp32"]),
    "bf16-amp": (["--amp", "bf16"], ["--dtype", "bf16-amp"]),
    "bf16": (["--dtype", "bf16"], ["--dtype", "bf16"]),
    "lora8-bf16-amp": (["--amp", "bf16", "--lora", "8"], ["--dtype", "bf16-amp", "--lora", "8"]),
    "ckpt-bf16-amp": (["--amp", "bf16", "--checkpointing"],
                      ["--dtype", "bf16-amp", "--checkpointing"]),
}

# (model, variant); "<model>-<variant>" names a case. The LoRA case needs peft.
CASES = [
    ("gpt2", "fp32"), ("gpt2", "bf16-amp"), ("gpt2", "ckpt-bf16-amp"),
    ("llama", "fp32"), ("llama", "bf16-amp"), ("llama", "bf16"), ("llama", "lora8-bf16-amp"),
    ("qwen2", "fp32"), ("qwen2", "bf16-amp"),
    ("bert", "fp32"), ("bert", "bf16-amp"),
    ("vit", "fp32"), ("vit", "bf16-amp"),
]

FAMILY_BUG = "family bug"
TRACER = "tracer artifact"
NOT_MODELLED = "not modelled"

KNOWN = [
    {
        "key": "sdpa-backward-delta",
        "verdict": NOT_MODELLED,
        "title": "SDPA backward: the family's softmax_d buffer, kernel-internal memory the "
                 "tracer cannot see",
        "why": "The fused backward kernels allocate scratch inside the op (flash_api.cpp "
               "mha_bwd: `softmax_d` [b, heads, seqlen_q_rounded] fp32 and `dq_accum`; the "
               "efficient kernel a `delta` and workspace) and free it before returning. Fake "
               "kernels allocate only the op's outputs (the tracer notes this), so the tracer "
               "has none of it; the family models one [b, heads, s] fp32 softmax_d per "
               "attention. Counted, not compared.",
        "counts": {
            "gpt2-fp32": {"temporary/family": 2},
            "gpt2-bf16-amp": {"temporary/family": 2},
            "gpt2-ckpt-bf16-amp": {"temporary/family": 2},
            "llama-bf16-amp": {"temporary/family": 2},
            "llama-bf16": {"temporary/family": 2},
            "llama-lora8-bf16-amp": {"temporary/family": 2},
            "qwen2-bf16-amp": {"temporary/family": 2},
            "bert-fp32": {"temporary/family": 2},
            "bert-bf16-amp": {"temporary/family": 2},
            "vit-fp32": {"temporary/family": 2},
            "vit-bf16-amp": {"temporary/family": 2},
        },
    },
    {
        "key": "math-sdpa-mask-add",
        "verdict": TRACER,
        "title": "Math SDPA: the mask is added out of place under the tracer",
        "why": "`_scaled_dot_product_attention_math` adds the mask in place "
               "(`attn.add_(*attn_mask)`) unless `at::areAnyTensorSubclassLike({attn, "
               "*attn_mask})`, which is true for FakeTensors (and whenever a Python dispatch "
               "mode is active): the tracer records an out-of-place `attn.add(*attn_mask)`, one"
               " [b, heads, s, s] tensor per layer that a GPU run does not allocate. The family"
               " is right here.",
        "counts": {
            "llama-fp32": {"temporary/tracer": 2},
            "qwen2-fp32": {"temporary/tracer": 2},
        },
    },
    {
        "key": "rotary-extra-copies",
        "verdict": NOT_MODELLED,
        "title": "RoPE: position ids cast to fp32 and the attention_scaling product",
        "why": "LlamaRotaryEmbedding.forward computes `position_ids[..., None].float() * "
               "self.inv_freq.to(x.device, dtype=torch.float)`: an fp32 copy of the position "
               "ids, and with bf16 weights an fp32 copy of the bf16 inv_freq buffer. The family"
               " computes the frequencies directly from an fp32 matmul (it models `emb.cos() * "
               "attention_scaling` since `rotary-cos-sin-saved` was fixed). Small: s·4 B and "
               "head_dim/2·4 B per forward.",
        "counts": {
            "llama-fp32": {"temporary/tracer": 1},
            "llama-bf16-amp": {"temporary/tracer": 1},
            "llama-bf16": {"temporary/tracer": 2},
            "llama-lora8-bf16-amp": {"temporary/tracer": 1},
            "qwen2-fp32": {"temporary/tracer": 1},
            "qwen2-bf16-amp": {"temporary/tracer": 1},
        },
    },
    {
        "key": "position-ids",
        "verdict": NOT_MODELLED,
        "title": "Decoder position ids: `arange(s) + past_seen_tokens`",
        "why": "GPT2Model and LlamaModel (and Qwen2Model) compute `position_ids = "
               "torch.arange(s) + past_seen_tokens` (two [s] int64 tensors; the sum is kept: "
               "GPT-2's wpe embedding saves it). The family's GPT-2 allocates one arange (which"
               " it saves, matching the sum), its LLaMA none (its RoPE does not need them). "
               "GPT2Model embeds the tokens first and then makes the position ids; the family "
               "makes the arange first (an order difference, counted where it shows).",
        "counts": {
            "gpt2-fp32": {"temporary/tracer": 1},
            "gpt2-bf16-amp": {"temporary/tracer": 1},
            "gpt2-ckpt-bf16-amp": {"temporary/family": 1, "temporary/tracer": 1},
            "llama-fp32": {"temporary/tracer": 2},
            "llama-bf16-amp": {"temporary/tracer": 2},
            "llama-bf16": {"temporary/tracer": 2},
            "llama-lora8-bf16-amp": {"temporary/tracer": 2},
            "qwen2-fp32": {"temporary/tracer": 2},
            "qwen2-bf16-amp": {"temporary/tracer": 2},
        },
    },
    {
        "key": "packed-sequence-check",
        "verdict": NOT_MODELLED,
        "title": "transformers' mask preparation: the packed-sequence check on position ids",
        "why": "create_causal_mask calls find_packed_sequence_indices (masking_utils.py): "
               "`position_ids[:, :1] - 1`, `torch.diff(..., prepend=...)` (a cat and a sub), "
               "`(diff != 1).cumsum(-1)` and `(mask[:, -1] == 0).all()` — seven small tensors "
               "(1 B to ~1 KiB) per forward, which the family does not model. (The `.all()` is "
               "also a host sync on a GPU.)",
        "counts": {
            "gpt2-fp32": {"temporary/tracer": 7},
            "gpt2-bf16-amp": {"temporary/tracer": 7},
            "gpt2-ckpt-bf16-amp": {"temporary/tracer": 7},
            "llama-fp32": {"temporary/tracer": 7},
            "llama-bf16-amp": {"temporary/tracer": 7},
            "llama-bf16": {"temporary/tracer": 7},
            "llama-lora8-bf16-amp": {"temporary/tracer": 7},
            "qwen2-fp32": {"temporary/tracer": 7},
            "qwen2-bf16-amp": {"temporary/tracer": 7},
        },
    },
    {
        "key": "embedding-sort",
        "verdict": NOT_MODELLED,
        "title": "Embedding backward: the index sort buffers, kernel-internal memory the tracer"
                 " cannot see",
        "why": "embedding_dense_backward on CUDA (aten/src/ATen/native/cuda/Embedding.cu) sorts"
               " the indices first: `sorted_indices` and `orig_indices = "
               "at::empty_like(indices)` (and an `arange` of the same size for the sort), "
               "index-sized int64 tensors allocated and freed inside the op. The family models "
               "the two; fake kernels allocate only the op's output, so the tracer has none.",
        "counts": {
            "gpt2-fp32": {"temporary/family": 4},
            "gpt2-bf16-amp": {"temporary/family": 4},
            "gpt2-ckpt-bf16-amp": {"temporary/family": 4},
            "llama-fp32": {"temporary/family": 2},
            "llama-bf16-amp": {"temporary/family": 2},
            "llama-bf16": {"temporary/family": 2},
            "llama-lora8-bf16-amp": {},
            "qwen2-fp32": {"temporary/family": 2},
            "qwen2-bf16-amp": {"temporary/family": 2},
            "bert-fp32": {"temporary/family": 6},
            "bert-bf16-amp": {"temporary/family": 6},
        },
    },
    {
        "key": "checkpoint-tracer-labels",
        "verdict": TRACER,
        "title": "Checkpointing: the tracer leaves what checkpointed blocks save unlabelled and"
                 " misattributes the recomputed graph's backward",
        "why": "The tracer labels a tensor `activation` in its saved_tensors_hooks pack hook. "
               "torch.utils.checkpoint (non-reentrant, transformers 5's default: "
               "use_reentrant=False) installs its own saved_tensors_hooks around the "
               "checkpointed forward (`_checkpoint_hook`, which saves a holder instead of the "
               "tensor) and around the recomputation (`_recomputation_hook`, which stores the "
               "recomputed tensors in the frame); being innermost they replace the tracer's, so"
               " neither the blocks' inputs kept for recomputation nor the tensors saved by the"
               " recomputed graph are labelled: they stay `temporary` (sizes and lifetimes are "
               "right). For this case activations and temporaries are compared as one sequence "
               "per phase. Second, the recomputation ends by an exception: with early stop (the"
               " default) the recomputation hook raises _StopRecomputationError once the last "
               "saved tensor is recomputed, inside the block's `mlp.dropout`; the tracer's "
               "module forward post-hooks (ModuleScope) never run, so the recomputed nodes get "
               "no module and the stale stack top attributes the backward allocations of the "
               "recomputed graph to `... .mlp.dropout` (the comparison is by sizes and order, "
               "so no class depends on it).",
        "counts": {
            "gpt2-ckpt-bf16-amp": {},
        },
    },
]

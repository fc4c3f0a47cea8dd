"""The built-in families against the tracer, as data: the cases compared and every known class
of difference between the two streams, with its cause and the exact number of entries it
accounts for in each case. tests/tracer/families_vs_tracer.py does the comparison (its code
recognises each class's entries by key) and tests/tracer/test_families_vs_tracer.py asserts that
every case comes out exactly as written here; the generated section of docs/accuracy.md is made
from the same data (scripts/families_vs_tracer.py --write docs/accuracy.md).

Each case's config is traced (``python -m vramscope.tracer --model hf:config.json``) and
predicted (``vramscope predict --model config.json --emit-stream``) with the same batch,
sequence, dtype, optimizer (AdamW) and number of steps.

A class (``KNOWN``):

- ``key``, ``title``, ``why``: the difference and its cause, checked in the transformers or
  PyTorch sources or in the tracer.
- ``verdict``: FAMILY_BUG (the family is wrong), TRACER (the tracer is: the family is right),
  NOT_MODELLED (what the family leaves out on purpose, or what the tracer cannot see).
- ``fixed``: for a family bug fixed since, what changed. The class then accounts for nothing: its
  code still recognises the old behaviour, so a regression shows under its name.
- ``effect``: for a family bug not fixed, its measured effect on the H200 goldens.
- ``counts``: the cases the class applies to, and for each the entries it accounts for, as
  "<category>/<side>": n — per step for gradients, activations and temporaries (both steps
  alike), in all for weights and optimizer state; "lifetime": 1 where its difference is a
  lifetime (same tensors, freed at another time) and shows. A case with {} is one where the class
  applies and accounts for nothing. A class accounts for exactly these counts, in every case,
  or the test fails: more, fewer, or none at all.
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
        "key": "peft-prefix",
        "verdict": FAMILY_BUG,
        "title": "LoRA: the family's parameter names lack peft's `base_model.model.` prefix",
        "why": "peft.get_peft_model wraps the model in a PeftModelForCausalLM whose "
               "`base_model` is a LoraModel holding the original model as `model`, so every "
               "parameter (and its gradient and optimizer state) is named "
               "`base_model.model.<transformers name>` (peft/peft_model.py, "
               "tuners/tuners_utils.py). The family names LoRA's own tensors the peft way "
               "(`q_proj.base_layer.weight`, `lora_A.default.weight`) but without the prefix. "
               "Sizes agree once the prefix is taken off.",
        "fixed": "The family now enters a `base_model.model` module scope around the model "
                 "under LoRA (SimulateTraining), so every name carries peft's prefix.",
        "counts": {
            "llama-lora8-bf16-amp": {},
        },
    },
    {
        "key": "vit-v5-names",
        "verdict": FAMILY_BUG,
        "title": "ViT: the family uses transformers 4's module names; transformers 5 renamed "
                 "them",
        "why": "transformers 5 rewrote modeling_vit.py: ViTModel holds `layers` (not "
               "`encoder.layer`), ViTAttention has `q_proj`/`k_proj`/`v_proj`/`o_proj` (not "
               "`attention.query`... and `output.dense`) and the MLP is `mlp.fc1`/`mlp.fc2` "
               "(not `intermediate.dense`/`output.dense`); the H200 goldens (transformers 5.17)"
               " use the new names too. The family builds the 4.x names, so every block "
               "parameter, gradient and Adam state is misnamed (sizes agree once renamed). The "
               "parameter order changes with the layout as well (layernorm_before/after now "
               "come before the MLP), which reorders the optimizer's per-parameter temporaries.",
        "fixed": "The family builds ViT's blocks as `vit.layers.N` with "
                 "`attention.{q,k,v,o}_proj`, `layernorm_before`, `layernorm_after`, `mlp.fc1`,"
                 " `mlp.fc2`, in that order: names and the optimizer's parameter order agree "
                 "(the optimizer phase is compared in order again).",
        "counts": {
            "vit-fp32": {},
            "vit-bf16-amp": {},
        },
    },
    {
        "key": "buffers",
        "verdict": FAMILY_BUG,
        "title": "Non-persistent buffers the family does not allocate",
        "why": "`model.to(device)` moves buffers too, persistent or not: LlamaRotaryEmbedding "
               "(and Qwen2's) registers `inv_freq` and `original_inv_freq` ([head_dim/2] each, "
               "in the model's dtype after `.to(dtype)`), BertEmbeddings registers "
               "`position_ids` and `token_type_ids` ([1, max_position_embeddings] int64 each). "
               "The family allocates no buffer for these models (it does for ResNet's batch "
               "norms). A few hundred bytes to a few KiB.",
        "fixed": "The family allocates the buffers as weights: LLaMA/Qwen2's "
                 "`model.rotary_emb.inv_freq` and `original_inv_freq` in the weights' dtype, "
                 "BERT's `bert.embeddings.position_ids` and `token_type_ids` as int64 [1, "
                 "max_position_embeddings].",
        "counts": {
            "llama-fp32": {},
            "llama-bf16-amp": {},
            "llama-bf16": {},
            "llama-lora8-bf16-amp": {},
            "qwen2-fp32": {},
            "qwen2-bf16-amp": {},
            "bert-fp32": {},
            "bert-bf16-amp": {},
        },
    },
    {
        "key": "vit-embedding-grads",
        "verdict": FAMILY_BUG,
        "title": "ViT embeddings: wrong gradient sizes for cls_token, position_embeddings and "
                 "the patch projection's bias",
        "why": "ViTEmbeddings computes `cat((cls_token.expand(b, -1, -1), patches), 1) + "
               "position_embeddings` with the bias inside the Conv2d. In backward, CatBackward0"
               " hands each input a slice of the gradient (`grad.narrow`, a view: no "
               "allocation), ExpandBackward0 and the engine's validate_outputs reduce the "
               "broadcast gradients (`sum_to_size`) to [1, 1, h] and [1, p+1, h], and "
               "convolution_backward returns the bias gradient [h]. The family gives "
               "CatBackward0 a new full-size tensor per input (aten::slice_backward), adds the "
               "bias as a separate broadcast add and never reduces a broadcast gradient, so the"
               " three `.grad` tensors are b·(p+1)·h·4 B instead of h·4, (p+1)·h·4 and h·4 B "
               "(17408 B instead of 512, 8704 and 512 here), and backward has extra full-size "
               "slice_backward temporaries.",
        "fixed": "The position embeddings' broadcast add sums its gradient to [1, p+1, h] "
                 "(`aten::sum`), the conv computes the bias gradient [h] itself, and "
                 "CatBackward0 sums the CLS token's slice to [1, 1, h] and passes the patches' "
                 "slice on (no slice_backward).",
        "counts": {
            "vit-fp32": {},
            "vit-bf16-amp": {},
        },
    },
    {
        "key": "vit-patch-embedding",
        "verdict": FAMILY_BUG,
        "title": "ViT patch embedding: the family adds the conv bias separately and "
                 "materialises the expanded CLS token",
        "why": "ViTPatchEmbeddings is an nn.Conv2d with a bias: the convolution writes its "
               "output with the bias added (one [b, h, p] tensor; under autocast the bias is "
               "cast to bf16 too, an h·2 B copy) and `cls_token.expand(b, -1, -1)` is a view. "
               "The family makes a bias-less convolution, then a broadcast add (a second b·p·h "
               "tensor) and an `aten::expand` allocation of b·h elements; both are freed in "
               "forward, so only the forward peak is affected. Under autocast PyTorch's "
               "convolution also computes a bf16 bias gradient (h·2 B, then cast to the fp32 "
               ".grad) and the patch rows' gradient is cast back to bf16 at the cat (the cat of"
               " the bf16 patches and the fp32 CLS token is fp32), b·p·h·2 B; the family has "
               "neither.",
        "fixed": "Conv2d takes the bias (autocast casts bias, weight, input; "
                 "ConvolutionBackward0 makes the bias gradient), `cls_token.expand` is a view, "
                 "the cat takes the wider dtype and its backward sums the CLS slice and passes "
                 "the rest on. (Under autocast PyTorch casts that rest back to the conv "
                 "output's bf16, which the family does not model: counted with "
                 "`mixed-dtype-add-grad-cast`.)",
        "counts": {
            "vit-fp32": {},
            "vit-bf16-amp": {},
        },
    },
    {
        "key": "conv-saves-weight",
        "verdict": FAMILY_BUG,
        "title": "Autocast: the convolution's bf16 weight copy is saved for backward",
        "why": "ConvolutionBackward0 saves both `input` and `weight` whenever it is created "
               "(the derivative of convolution is one formula for all inputs, unlike mm/addmm "
               "whose saved operands depend on which inputs need a gradient; checked with "
               "torch: `grad_fn._saved_weight` is the bf16 copy even when the input needs no "
               "gradient). Under autocast that copy (h·C·P·P·2 B) stays until backward. The "
               "family saves the weight only when the input requires a gradient, so for the "
               "patch embedding (input: pixels) it frees the copy in forward.",
        "fixed": "ConvolutionBackward0 now saves the input and the (autocast copy of the) "
                 "weight whatever needs a gradient.",
        "counts": {
            "vit-bf16-amp": {},
        },
    },
    {
        "key": "vit-cls-select",
        "verdict": FAMILY_BUG,
        "title": "ViT head: the classifier sees the CLS rows only",
        "why": "ViTForImageClassification applies the classifier to `sequence_output[:, 0, :]` "
               "(a view). Under autocast the classifier's input cast copies only that view: "
               "b·h·2 B. Its backward (SelectBackward0, `select_backward`) allocates a "
               "zero-filled gradient of the whole [b, p+1, h] sequence output. The family "
               "passes the whole sequence output to the classifier with b rows, so it casts "
               "b·(p+1)·h elements (and its cast's backward makes a b·(p+1)·h fp32 gradient "
               "where PyTorch makes a b·h one) and has no select_backward.",
        "fixed": "The classifier takes a select view [b, h] of the final norm's output (under "
                 "autocast its cast copies b·h elements) and SelectBackward0 makes the "
                 "zero-filled gradient of the whole [b, p+1, h].",
        "counts": {
            "vit-fp32": {},
            "vit-bf16-amp": {},
        },
    },
    {
        "key": "sdpa-rng-cpu",
        "verdict": TRACER,
        "title": "SDPA (memory-efficient kernel, with dropout): the philox seed and offset are "
                 "CPU tensors on a GPU",
        "why": "`_efficient_attention_forward` "
               "(aten/src/ATen/native/transformers/cuda/attention.cu) makes the seed and offset"
               " it returns with `at::scalar_tensor(..., at::dtype(at::kLong))` (host memory) "
               "when dropout is on and no CUDA graph is being captured; they are saved for "
               "backward, which reads them with `*philox_seed.data_ptr<int64_t>()` on the host."
               " The op's meta kernel (torch/_meta_registrations.py, "
               "meta__scaled_dot_product_efficient_attention) returns them on the `meta` device"
               " ('depends on whether we are capturing'), and fake tensor mode puts them on the"
               " op's device, so the tracer records two 8-byte CUDA tensors per attention that "
               "a GPU run does not allocate. The family is right here.",
        "fixed": "The tracer leaves the memory-efficient kernel's seed and offset (results 2 and "
                 "3 of `_scaled_dot_product_efficient_attention`) and their views out of the "
                 "stream (tracking.py, `_HOST_RESULTS`), with dropout or without "
                 "(`efficient-rng-device`).",
        "counts": {
            "gpt2-fp32": {},
            "bert-fp32": {},
        },
    },
    {
        "key": "sdpa-rng-device",
        "verdict": FAMILY_BUG,
        "title": "SDPA (cuDNN, flash): the kernel's RNG state tensors (saved for backward) are "
                 "missing in the family",
        "why": "The fused kernels return their RNG state, which autograd saves: cuDNN "
               "(`_scaled_dot_product_cudnn_attention_cuda`: `cudnn_seed`/`cudnn_offset = "
               "at::zeros({1}, query.options().dtype(kLong))`, on the device, always) and flash"
               " (flash_api.cpp: `rng_state = at::empty({2}, kUInt64, kCUDA)` and a `_unused` "
               "0-d uint64, on the device, always: 16 + 8 B). The tracer sees them; the "
               "family's fused attention saved only the output and the logsumexp. Tiny (each is"
               " one 512 B allocator block on a GPU), one pair per attention layer.",
        "fixed": "FusedAttention saves two 8-byte device tensors (seed, offset) for 16-bit "
                 "inputs; what remains is `flash-rng-state-size` (flash's are 16 + 8 B) and "
                 "`efficient-rng-device` (the memory-efficient kernel without dropout).",
        "counts": {
            "gpt2-bf16-amp": {},
            "gpt2-ckpt-bf16-amp": {},
            "llama-bf16-amp": {},
            "llama-bf16": {},
            "llama-lora8-bf16-amp": {},
            "qwen2-bf16-amp": {},
            "bert-bf16-amp": {},
            "vit-bf16-amp": {},
        },
    },
    {
        "key": "efficient-rng-device",
        "verdict": TRACER,
        "title": "SDPA memory-efficient kernel without dropout: the tracer records two 8-byte "
                 "device tensors that a GPU run does not allocate",
        "why": "The meta kernel of `_scaled_dot_product_efficient_attention` "
               "(torch/_meta_registrations.py) returns the philox seed and offset as 0-d int64 "
               "tensors, which fake tensor mode puts on the op's device, so the tracer records "
               "two 8-byte CUDA tensors per attention, saved for backward. On a real GPU the "
               "memory-efficient kernel without dropout allocates only its output and "
               "log-sum-exp: the H200 goldens (torch 2.11) show it, `gpt_adamw_fp32` "
               "(F.scaled_dot_product_attention(is_causal=True), no dropout: per layer one "
               "2,097,152 B output and one 32,768 B log-sum-exp from "
               "`_efficient_attention_forward`, nothing else) and `hf/vit_b32_fp32` (ViT, "
               "attention dropout 0.0: no allocation of 8 B or less in forward but the loss's)."
               " The family, which allocates none, is right; it was first counted as a family "
               "bug from the CUDA source (`seed_t = at::empty({{}}, ...device(device))` in "
               "attention.cu), which these runs contradict. With dropout the seed and offset "
               "are host scalars (`sdpa-rng-cpu`).",
        "fixed": "The tracer leaves them out (`sdpa-rng-cpu`); with the cuBLASLt workspace its "
                 "matmul markers now name (the first addmm), the example GPT traced is exact "
                 "against `gpt_adamw_fp32` on an H100: allocated and reserved.",
        "counts": {
            "vit-fp32": {},
        },
    },
    {
        "key": "flash-rng-state-size",
        "verdict": FAMILY_BUG,
        "title": "SDPA flash kernel: the saved RNG state is 16 + 8 B, the family's 8 + 8 B",
        "why": "flash_api.cpp mha_fwd returns `rng_state = at::empty({2}, "
               "at::dtype(c10::kUInt64).device(at::kCUDA))` (16 B: seed and offset in one "
               "tensor, '[Note] BC breaking change to flash seed/offset') and `_unused = "
               "at::empty({}, ... kUInt64 ... kCUDA)` (8 B), both saved for backward; the meta "
               "kernel (meta__scaled_dot_product_flash_attention) returns the same shapes. The "
               "family gives every 16-bit fused attention cuDNN's pair "
               "(`cudnn_seed`/`cudnn_offset`, [1] int64 each); it cannot tell the kernels "
               "apart, and on sm90 grouped-query attention (LLaMA, Qwen2) goes to flash. 8 B "
               "per layer.",
        "fixed": "FusedAttention tells the kernels apart as PyTorch does on sm90: 16-bit "
                 "attention with fewer KV heads than query heads (or a head dim cuDNN does not "
                 "take) runs flash, whose saved RNG state is a [2] uint64 `rng_state` and a 0-d"
                 " uint64; cuDNN keeps its [1] int64 seed and offset. (Each is one 512 B "
                 "allocator block either way: no golden's figures move.)",
        "counts": {
            "llama-bf16-amp": {},
            "llama-bf16": {},
            "llama-lora8-bf16-amp": {},
            "qwen2-bf16-amp": {},
        },
    },
    {
        "key": "efficient-lse-padding",
        "verdict": FAMILY_BUG,
        "title": "SDPA memory-efficient kernel: the logsumexp is padded to a multiple of 32 "
                 "queries",
        "why": "`_efficient_attention_forward` allocates the logsumexp it saves for backward as"
               " [b, heads, ceil(s/32)·32] fp32 (`kAlignLSE`, 'should be aligned (by padding) "
               "in case M is not a good number for loading during backward'); the meta kernel "
               "does the same. The family sizes it [b, heads, s] as for the cuDNN/flash "
               "kernels: here b·h·48·4 = 1536 B instead of b·h·64·4 = 2048 B (ViT: 17 → 32 "
               "tokens). The efficient kernel is what PyTorch picks on sm90 for fp32 (cuDNN and"
               " flash take only fp16/bf16).",
        "fixed": "The family pads the fp32 (memory-efficient) log-sum-exp to a multiple of 32 "
                 "queries.",
        "counts": {
            "gpt2-fp32": {},
            "bert-fp32": {},
            "vit-fp32": {},
        },
    },
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
        "key": "gpt2-qkv-gradients",
        "verdict": FAMILY_BUG,
        "title": "GPT-2: SDPA backward gradients sized as the whole fused qkv tensor",
        "why": "GPT-2 splits its fused `c_attn` output into q, k and v (views). Their gradients"
               " from the SDPA backward are b·s·h each, and SplitBackward0 concatenates them "
               "into one [b, s, 3h] tensor (`aten::cat`). The family passes the qkv tensor "
               "itself as q, k and v, so `FusedAttention`'s backward sizes dq, dk and dv from "
               "it: three b·s·3h tensors, 3x too large, and no cat (the three are summed into "
               "the first): 9·b·s·h elements where PyTorch allocates 6·b·s·h per layer "
               "(transient, at the backward peak's doorstep for long sequences).",
        "fixed": "q, k and v are views of qkv (StepSimulator::View); the SDPA backward makes "
                 "dq, dk, dv of their own size and a SplitWithSizesBackward0 node the [b, s, "
                 "3h] cat.",
        "counts": {
            "gpt2-fp32": {},
            "gpt2-bf16-amp": {},
            "gpt2-ckpt-bf16-amp": {},
        },
    },
    {
        "key": "gqa-fp32-math",
        "verdict": FAMILY_BUG,
        "title": "GQA in fp32: PyTorch runs the math SDPA kernel, the family a fused one",
        "why": "transformers passes `enable_gqa=True` to SDPA when there is no mask "
               "(integrations/sdpa_attention.py, use_gqa_in_sdpa). On sm90 the cuDNN and flash "
               "kernels take only fp16/bf16 and the memory-efficient kernel refuses "
               "grouped-query attention (sdp_utils.cpp: "
               "check_batch_size_and_num_heads_dense<false "
               "/*supports_grouped_query_attention*/>), so fp32 LLaMA/Qwen2 fall back to "
               "`_scaled_dot_product_attention_math`: K and V repeated to all heads "
               "(`repeat_interleave`, saved), q scaled, the [b, heads, s, s] scores "
               "(`_safe_softmax`, saved) and the output transposed by a copy saved by o_proj — "
               "an s² term the family does not have. The family always modelled a fused kernel "
               "(saving q, k, v, output and logsumexp).",
        "fixed": "fp32 LLaMA/Qwen2 with fewer KV heads repeat K and V to every head (a clone "
                 "each) and run the written-out attention (Ops::MathAttention).",
        "counts": {
            "llama-fp32": {},
            "qwen2-fp32": {},
        },
    },
    {
        "key": "math-sdpa-scaling",
        "verdict": FAMILY_BUG,
        "title": "Math SDPA: PyTorch scales q and k, the family the scores",
        "why": "`_scaled_dot_product_attention_math` "
               "(aten/src/ATen/native/transformers/attention.cpp) scales before the product "
               "'for stability': `query_ * sqrt(scale)` ([b, heads, s, d]) and "
               "`key_expanded.transpose(-2, -1) * sqrt(scale)` (saved by the bmm), and in "
               "backward MulBackward multiplies both gradients by it again (two [b, heads, s, "
               "d] tensors). The family's MathAttention (the eager-attention model) scales the "
               "[b, heads, s, s] scores instead, one s² tensor in forward and one in backward. "
               "For long sequences the family's transient is the larger one.",
        "fixed": "fp32 LLaMA/Qwen2 with grouped KV heads run Ops::SdpaMath, the math kernel as "
                 "PyTorch writes it: q and the repeated k^T are each multiplied by sqrt(scale) "
                 "before the product (MulBackward1 in backward), the scores are not. (The class"
                 " still recognises the old [b, heads, s, s] product on the family side.)",
        "counts": {
            "llama-fp32": {},
            "qwen2-fp32": {},
        },
    },
    {
        "key": "math-sdpa-causal-mask",
        "verdict": FAMILY_BUG,
        "title": "Math SDPA: the causal mask is built inside the kernel",
        "why": "With `is_causal=True` (transformers passes it when there is no padding mask) "
               "`_scaled_dot_product_attention_math` makes `at::ones_symint({L, S}, "
               "kBool).tril()` (two [s, s] bool tensors) and `convert_boolean_attn_mask` turns "
               "it into an [s, s] float mask with `at::where(mask, 0.0, -inf)` (two 0-d scalar "
               "tensors on the device and the [s, s] result), every layer, every forward. The "
               "family's written-out attention has no mask tensors (transient, s²·6 B).",
        "fixed": "Ops::SdpaMath builds the causal mask inside the kernel, as "
                 "`_scaled_dot_product_attention_math` does with is_causal: ones and tril ([s, "
                 "s] bool), two scalar tensors and the [s, s] float mask of `where`, every "
                 "layer, every forward. (A regression shows as unexplained entries.)",
        "counts": {
            "llama-fp32": {},
            "qwen2-fp32": {},
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
        "key": "math-sdpa-copies",
        "verdict": FAMILY_BUG,
        "title": "Math SDPA: PyTorch saves copies (contiguous q, k^T, the transposed output) "
                 "where the family saves q, the repeated K and the bmm output",
        "why": "In `_scaled_dot_product_attention_math` the rotary q is [b, heads, s, d] in the"
               " [b, s, heads, d] layout (the `.transpose(1, 2)` of q_proj's output, kept by "
               "the elementwise rotary ops), so `matmul` copies `q * sqrt(scale)` to fold it "
               "for the bmm (aten::clone, saved) while q's rotary sum and the repeated K "
               "(`repeat_interleave`) are temporaries (the bmm saves `k^T * sqrt(scale)`); the "
               "output bmm's [b, heads, s, d] result is a temporary too, copied by "
               "transformers' `attn_output.transpose(1, 2).contiguous()` (saved by o_proj). The"
               " family's bmms save q's rotary sum, the repeated K and the bmm output "
               "themselves: the saved bytes agree, but three [b, heads, s, d] temporaries per "
               "layer are missing in forward. In backward the output's gradient needs a copy to"
               " go back through the transpose and UnsafeView (aten::clone) and so does v's "
               "(the repeat's `sum` is [b, kv_heads, s, d] contiguous, v_proj's view wants [b, "
               "s, kv_heads·d]); the family has neither.",
        "fixed": "Ops::SdpaMath saves the copies PyTorch saves (the folded q, k^T scaled, the "
                 "repeated V) and leaves q's rotary sum, the repeated K and the product's "
                 "output temporaries; LLaMA copies the output for `transpose(1, "
                 "2).contiguous()`, and Ops::LayoutView copies the output's and v's gradients "
                 "back through their transposes. (A regression shows as unexplained entries.)",
        "counts": {
            "llama-fp32": {},
            "qwen2-fp32": {},
        },
    },
    {
        "key": "rotary-cos-sin-saved",
        "verdict": FAMILY_BUG,
        "title": "RoPE: cos and sin are saved for backward (they live until the first layer's "
                 "backward)",
        "why": "apply_rotary_pos_emb computes `q * cos + rotate_half(q) * sin`; MulBackward0 "
               "saves the other operand when one needs a gradient (checked: `(q * "
               "c).grad_fn._saved_other`), so the cos and sin that LlamaRotaryEmbedding.forward"
               " returns (`emb.cos() * attention_scaling`, then `.to(x.dtype)`) are held by "
               "every layer's rotary products until backward. The family's Rotary saves nothing"
               " for the products and frees cos and sin at the end of forward: 2·s·head_dim·elt"
               " bytes that the family releases a whole backward too early.",
        "fixed": "cos and sin are the scaled products (`aten::mul`, then the cast to the hidden"
                 " states' dtype where that is not fp32) and every rotary product saves them "
                 "(Ops::Rotary uses Ops::Mul).",
        "counts": {
            "llama-fp32": {},
            "llama-bf16-amp": {},
            "llama-bf16": {},
            "llama-lora8-bf16-amp": {},
            "qwen2-fp32": {},
            "qwen2-bf16-amp": {},
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
               "attention_scaling` since, see `rotary-cos-sin-saved`). Small: s·4 B and "
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
        "key": "rotary-autocast-fp32",
        "verdict": FAMILY_BUG,
        "title": "RoPE under autocast: the rotary products are fp32, then cast back for SDPA",
        "why": "Under autocast the rotary cos/sin are fp32 (the rotary embedding runs on the "
               "fp32 residual stream and returns `cos.to(x.dtype)`), and `mul` is not an "
               "autocast op: `q * cos` and `rotate_half(q) * sin` promote the bf16 q and k to "
               "fp32 ([b, heads, s, d]·4 B each, and their sum), and "
               "scaled_dot_product_attention (an autocast lower-precision op) casts q_embed and"
               " k_embed back to bf16: those casts are what SDPA saves. The family computes the"
               " rotary products in bf16 and saves them directly: the saved sizes agree but the"
               " forward and backward temporaries of the rotary are half the real size, and the"
               " saved tensors are `add` outputs instead of `_to_copy` ones.",
        "fixed": "Under autocast cos and sin are fp32, so the rotary products and their sum are"
                 " fp32 (type promotion) and FusedAttention casts q and k to bf16 (an autocast "
                 "op's operands), saving the casts. The backward half remains: "
                 "`rotary-autocast-backward`.",
        "counts": {
            "llama-bf16-amp": {},
            "llama-lora8-bf16-amp": {},
            "qwen2-bf16-amp": {},
        },
    },
    {
        "key": "rotary-autocast-backward",
        "verdict": FAMILY_BUG,
        "title": "RoPE backward under autocast: the products' gradients are fp32, cast back to "
                 "bf16",
        "why": "Under autocast the rotary products are fp32 (bf16 q or k times the fp32 "
               "cos/sin), so the gradient reaching them is fp32: MulBackward0 computes `grad * "
               "cos` and `grad * sin` in fp32 ([b, heads, s, d]·4 B each) and the engine's "
               "validate_outputs casts each to the bf16 input's dtype (aten::_to_copy, ·2 B), "
               "for q and for k. The family's Ops::Mul backward makes each input's gradient "
               "directly in that input's dtype: one bf16 product where PyTorch has an fp32 "
               "product and a bf16 cast (transient; the fp32 product is twice the family's).",
        "fixed": "Ops::Mul's backward makes each gradient in the output gradient's dtype (fp32 "
                 "for the rotary products under autocast) and casts it to its input's dtype "
                 "afterwards, as validate_outputs does. (A regression shows as unexplained "
                 "entries.)",
        "counts": {
            "llama-bf16-amp": {},
            "llama-lora8-bf16-amp": {},
            "qwen2-bf16-amp": {},
        },
    },
    {
        "key": "sdpa-cast-order",
        "verdict": FAMILY_BUG,
        "title": "Autocast: SDPA's q and k are cast k first",
        "why": "scaled_dot_product_attention is an autocast lower-precision op: the wrapper "
               "casts its arguments in the argument pack (autocast_mode.h, `cached_cast(..., "
               "args)...`), evaluated right to left by GCC, so for `sdpa(query, key, value)` "
               "the fp32 rotary outputs are cast key first, then query (the tracer runs the "
               "real autocast kernel: k's [b, kv_heads, s, d] cast comes before q's [b, heads, "
               "s, d]); in backward the ToCopyBackward0 nodes then run q's first (the higher "
               "sequence number). The family's FusedAttention casts q, k, v left to right. Only"
               " the order differs (visible with grouped-query attention, where the sizes "
               "differ); compared after putting the family's casts in PyTorch's order, each "
               "move counted.",
        "fixed": "FusedAttention casts its operands last to first (v, k, q), as autocast's "
                 "argument pack does: k's cast before q's in forward, q's ToCopyBackward0 "
                 "before k's in backward.",
        "counts": {
            "llama-bf16-amp": {},
            "llama-lora8-bf16-amp": {},
            "qwen2-bf16-amp": {},
        },
    },
    {
        "key": "final-hidden-lifetime",
        "verdict": FAMILY_BUG,
        "title": "Under autocast: the final hidden states live through the loss",
        "why": "GPT2LMHeadModel/LlamaForCausalLM.forward keep `hidden_states = "
               "outputs.last_hidden_state` in a local variable while they compute the logits "
               "and the loss, so the final norm's output (b·s·h·4 B: fp32 under autocast, where"
               " lm_head saves only its bf16 cast) is freed only when forward returns, after "
               "the loss. BertForMaskedLM (`sequence_output = outputs[0]`, the last block's "
               "output LayerNorm, which the MLM transform's dense saves only as a bf16 cast) "
               "and ViTForImageClassification (`sequence_output = outputs.last_hidden_state`, "
               "the final layernorm, of which the classifier casts only the CLS rows) do the "
               "same. The family frees it right after the head's first linear. Same tensors, "
               "sizes and order: a lifetime difference, seen as a lower forward peak where the "
               "loss is the peak (b·s·h·4 B for the decoders and BERT; ViT's forward peaks at "
               "the classifier in the family, so there it shows as a few bytes). (In fp32 the "
               "head's linear saves it, so both keep it.)",
        "fixed": "The causal-LM head (CausalLmHead), BERT's MLM head and ViT's classifier free "
                 "the final hidden states after the loss, when forward returns; under autocast "
                 "the final norm's output is live through the loss as in PyTorch.",
        "counts": {
            "gpt2-bf16-amp": {},
            "gpt2-ckpt-bf16-amp": {},
            "llama-bf16-amp": {},
            "llama-lora8-bf16-amp": {},
            "qwen2-bf16-amp": {},
            "bert-bf16-amp": {},
            "vit-bf16-amp": {},
        },
    },
    {
        "key": "nll-saves-target",
        "verdict": FAMILY_BUG,
        "title": "Causal-LM loss: the shifted labels are saved by nll_loss until backward",
        "why": "transformers' ForCausalLMLoss pads and shifts the labels (`nn.functional.pad` "
               "then `[..., 1:].contiguous()`: a [b, s] int64 copy) and calls cross_entropy; "
               "NllLossBackward0 saves `target` (checked: `grad_fn._saved_target` is the labels"
               " tensor). The family frees the shifted labels right after the loss, so a b·s·8 "
               "B tensor that lives until backward is a forward temporary there.",
        "fixed": "CrossEntropy takes the target and NllLossBackward0 saves it (the shifted "
                 "labels of the causal LMs).",
        "counts": {
            "gpt2-fp32": {},
            "gpt2-bf16-amp": {},
            "gpt2-ckpt-bf16-amp": {},
            "llama-fp32": {},
            "llama-bf16-amp": {},
            "llama-bf16": {},
            "llama-lora8-bf16-amp": {},
            "qwen2-fp32": {},
            "qwen2-bf16-amp": {},
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
        "key": "bert-id-buffers",
        "verdict": FAMILY_BUG,
        "title": "BERT: token type and position ids come from registered buffers",
        "why": "BertEmbeddings takes `position_ids = self.position_ids[:, :s]` (a view of the "
               "registered buffer) and `token_type_ids = "
               "torch.gather(self.token_type_ids.expand(...), 1, position_ids)` ([1, s] int64, "
               "then expanded: a view); the embeddings save these index tensors. The family "
               "allocates a [b, s] int64 `zeros` and an [s] int64 `arange` instead (both "
               "saved): b·s·8 + s·8 B where PyTorch has s·8 B (plus the buffers, see above).",
        "fixed": "The token types are an `aten::gather` of [1, s] int64 and the position ids a "
                 "view of the `position_ids` buffer.",
        "counts": {
            "bert-fp32": {},
            "bert-bf16-amp": {},
        },
    },
    {
        "key": "bert-token-type-embedding",
        "verdict": FAMILY_BUG,
        "title": "BERT: the token-type embedding is [b, s, h]; the family makes it [1, s, h] "
                 "and reduces its gradient",
        "why": "BertEmbeddings (transformers 5) gathers the token types from the buffer and "
               "then expands them to the batch before the lookup: `token_type_ids = "
               "buffered_token_type_ids.expand(batch_size, seq_length)` (a view), so "
               "`self.token_type_embeddings(token_type_ids)` is a [b, s, h] fp32 tensor and "
               "`inputs_embeds + token_type_embeddings` adds two tensors of the same shape (no "
               "broadcast; only the position embeddings, looked up with the [1, s] position "
               "ids, are [1, s, h]). The family looks the token types up with the [1, s] "
               "gathered ids: a [1, s, h] embedding (half the bytes here: b = 2) broadcast in "
               "the add, whose gradient its AddBackward0 then sums to [1, s, h] (an `aten::sum`"
               " PyTorch does not have). The embedding's backward sorts b·s indices in PyTorch,"
               " s in the family (`embedding-sort`).",
        "fixed": "The gathered [1, s] token types are expanded to [b, s] (a view) before the "
                 "lookup: the token-type embedding is [b, s, h], added without a broadcast (no "
                 "gradient sum); only the position embedding is [1, s, h].",
        "counts": {
            "bert-fp32": {},
            "bert-bf16-amp": {},
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
        "key": "tied-weight-gradient",
        "verdict": FAMILY_BUG,
        "title": "Tied weights: the two gradient contributions are summed out of place",
        "why": "GPT-2's lm_head and BERT's MLM decoder share the word-embedding matrix, so its "
               "AccumulateGrad receives two gradients. The engine sums them in place only into "
               "a buffered gradient that solely owns its storage (input_buffer.cpp accumulate /"
               " can_accumulate_inplace: `storage().use_count() == 1`); the first one, from the"
               " head's mm backward, is a transposed view (mm_mat2_backward returns "
               "`grad.t().mm(mat1).t()` for a transposed weight) whose base keeps the storage, "
               "so the engine computes `old + new`: a third vocab·h tensor that becomes `.grad`"
               " while the head's contribution is a temporary. The family keeps the head's "
               "contribution as `.grad` and adds the embedding's into it, one vocab·h tensor "
               "fewer at that moment. (Same gradient names and sizes in the end.)",
        "fixed": "StepSimulator::AccumulateIntoParam adds a second gradient out of place "
                 "(`aten::add` named `<param> (gradient sum)`) and the head's contribution "
                 "becomes a temporary (under autocast it did so too, wrongly: see "
                 "`tied-weight-gradient-autocast`).",
        "counts": {
            "gpt2-fp32": {},
            "bert-fp32": {},
        },
    },
    {
        "key": "tied-weight-gradient-autocast",
        "verdict": FAMILY_BUG,
        "title": "Tied weights under autocast: the family sums the two gradients out of place",
        "why": "Under autocast the head's contribution to the tied embedding matrix is the fp32"
               " cast of the bf16 weight gradient (ToCopyBackward0 of the autocast weight "
               "copy): a fresh, contiguous tensor that only the engine holds, so "
               "InputBuffer::accumulate adds the embedding's contribution into it in place and "
               "it becomes `.grad` (the tracer: the head's `_to_copy` is relabelled as the word"
               " embedding's `.grad`, the embedding's `embedding_dense_backward` freed right "
               "after). The family's AccumulateIntoParam always adds out of place (`aten::add` "
               "`<param> (gradient sum)`), which is right only for the fp32 transposed-mm case "
               "(`tied-weight-gradient`): under autocast its head contribution (the cast) "
               "becomes a temporary and a third vocab·h·4 B tensor is live at that moment (in "
               "`bert-bf16-amp` that moment becomes the family's backward peak).",
        "fixed": "StepSimulator::AccumulateIntoParam adds the second gradient out of place only"
                 " when the first is a matmul's weight gradient (`aten::mm`, the fp32 case); "
                 "into autocast's fresh fp32 copy it adds in place, and the head's cast becomes"
                 " `.grad`.",
        "counts": {
            "gpt2-bf16-amp": {},
            "gpt2-ckpt-bf16-amp": {},
            "bert-bf16-amp": {},
        },
    },
    {
        "key": "mixed-dtype-add-grad-cast",
        "verdict": NOT_MODELLED,
        "title": "Autocast: gradients cast back to bf16 at the fp32 residual adds (and ViT's "
                 "cat)",
        "why": "Under autocast a block's branch output (a linear's bf16 output after dropout) "
               "is added to the fp32 residual stream, and type promotion makes the sum fp32. In"
               " backward the engine's validate_outputs casts the fp32 gradient to each input's"
               " dtype, so the bf16 branch receives a bf16 copy (b·s·h·2 B, aten::_to_copy) at "
               "every residual add. The family passes the gradient on without that cast. ViT's "
               "embeddings have one more: `cat((cls_token.expand(...), patches), 1)` is fp32 "
               "(the fp32 CLS token and the bf16 conv output promote), so CatBackward0's slice "
               "for the patches is cast to bf16 (b·p·h·2 B) on its way to the convolution; the "
               "family's CatBackward0 passes it on as it is.",
        "fixed": "Ops::Add gives an operand whose dtype is not the output's the gradient cast "
                 "to its dtype (aten::_to_copy), and ViT's CatBackward0 casts the patches' "
                 "slice back to the convolution's dtype. The residual add that checkpointing "
                 "does not recompute (GPT-2's last) runs, with its cast, before the "
                 "recomputation, as the forward graph's own node does "
                 "(StepSimulator::Checkpoint). (A regression shows as unexplained entries.)",
        "counts": {
            "gpt2-bf16-amp": {},
            "gpt2-ckpt-bf16-amp": {},
            "llama-bf16-amp": {},
            "llama-lora8-bf16-amp": {},
            "qwen2-bf16-amp": {},
            "bert-bf16-amp": {},
            "vit-bf16-amp": {},
        },
    },
    {
        "key": "view-gradient-accumulation",
        "verdict": FAMILY_BUG,
        "title": "A tensor used by several linears: the first gradient sum is out of place",
        "why": "When one tensor feeds several nn.Linear layers (LLaMA's q/k/v on the input norm"
               " and gate/up on the post-attention norm, ViT's q/k/v), the engine sums their "
               "input gradients in an InputBuffer. The gradient a 3-D input receives from "
               "nn.Linear is a view (ViewBackward0: `grad.reshape(...)` of the 2-D mm result), "
               "which shares its storage with that result, so `can_accumulate_inplace` fails "
               "and the first sum is `old + new` (aten::add, one activation-sized tensor); "
               "later sums go in place into it. The family always adds in place into the first "
               "gradient. (Under autocast the input gradients are fresh fp32 casts, "
               "ToCopyBackward0 outputs, and are summed in place.)",
        "fixed": "nn.Linear's input gradient is a reshaped view of the mm result when the input"
                 " has more than two dimensions (Ops::linear_inputs_nd: the transformer "
                 "families, and layer lists with a [seq, features] input; "
                 "BackwardContext::NewReshaped), and StepSimulator::DeliverGrad adds a second "
                 "gradient into such a view out of place (`aten::add`), later ones in place "
                 "into the sum. (A regression shows as unexplained tracer entries: the old "
                 "behaviour has no signature of its own.)",
        "counts": {
            "llama-fp32": {},
            "llama-bf16": {},
            "qwen2-fp32": {},
            "vit-fp32": {},
        },
    },
    {
        "key": "mm-backward-order",
        "verdict": FAMILY_BUG,
        "title": "Bias-less linears: PyTorch computes the weight gradient before the input "
                 "gradient",
        "why": "MmBackward0 (the node of a bias-less nn.Linear: aten::linear → matmul → mm) "
               "computes the gradient of `mat2` (the weight) first and of `self` (the input) "
               "second: the tracer runs the real C++ node, and the weight gradient's allocation"
               " comes first; BmmBackward0 likewise (the written-out attention: the gradient of"
               " the values, `mat2`, before that of the probabilities). AddmmBackward0 (linears"
               " with a bias) does the input first, as the family does for both. Only the order"
               " differs; it shows where the weight gradient is a temporary (the bf16 product "
               "under autocast, cast to the fp32 .grad afterwards). Compared after putting the "
               "family's pair in PyTorch's order; each swap is counted.",
        "fixed": "Ops::Linear's MmBackward0 (no bias) makes the weight's gradient before the "
                 "input's, and MathAttention's BmmBackward0 nodes the gradient of `mat2` first,"
                 " as PyTorch's nodes do; AddmmBackward0 keeps the input first. (A regression "
                 "now shows as unexplained entries: the old order has no signature of its own.)",
        "counts": {
            "gpt2-fp32": {},
            "gpt2-bf16-amp": {},
            "gpt2-ckpt-bf16-amp": {},
            "llama-fp32": {},
            "llama-bf16-amp": {},
            "llama-bf16": {},
            "llama-lora8-bf16-amp": {},
            "qwen2-fp32": {},
            "qwen2-bf16-amp": {},
            "bert-fp32": {},
            "bert-bf16-amp": {},
            "vit-fp32": {},
            "vit-bf16-amp": {},
        },
    },
    {
        "key": "conv1d-cast-order",
        "verdict": FAMILY_BUG,
        "title": "GPT-2 under autocast: Conv1D's casts come weight, input, bias",
        "why": "Autocast casts an op's arguments in the wrapper's argument pack "
               "(autocast_mode.h, `cached_cast(..., args)...`), evaluated right to left by GCC:"
               " nn.Linear's `linear(input, weight, bias)` casts bias, weight, input (the order"
               " the family uses everywhere, as the H200 golden linear_adam_bf16 shows), but "
               "GPT-2's Conv1D calls `torch.addmm(bias, x, weight)`, so its casts come weight, "
               "input, bias (checked with CPU autocast and a dispatch mode). Only visible where"
               " the three copies are in the same sequence: with checkpointing every cast is a "
               "temporary. Compared after putting the family's casts in addmm's order; each "
               "move is counted.",
        "fixed": "GPT-2's Conv1D layers are linears with addmm's argument order "
                 "(LinearWeights::addmm_args): under autocast Ops::Linear casts their weight, "
                 "input, then bias.",
        "counts": {
            "gpt2-bf16-amp": {},
            "gpt2-ckpt-bf16-amp": {},
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
    {
        "key": "checkpoint-early-stop",
        "verdict": FAMILY_BUG,
        "title": "Checkpointing: the recomputation stops after the last saved tensor",
        "why": "torch.utils.checkpoint (non-reentrant, early_stop=True by default) stops the "
               "recomputation as soon as every tensor the block's backward needs has been "
               "recomputed (`_recomputation_hook` raises _StopRecomputationError). In a GPT-2 "
               "block the last saved tensor is the MLP dropout's mask, so the final residual "
               "add (b·s·h fp32, saved by nothing) is not recomputed. The family's "
               "recomputation runs the whole block.",
        "fixed": "StepSimulator::Checkpoint stops the recomputation early, as "
                 "torch.utils.checkpoint does by default: whatever the block allocates after "
                 "its last node that saves a tensor (GPT-2's final residual add) is dropped "
                 "from the stream.",
        "counts": {
            "gpt2-ckpt-bf16-amp": {},
        },
    },
    {
        "key": "broadcast-gradient-sum",
        "verdict": NOT_MODELLED,
        "title": "Broadcast position embeddings: the gradient is reduced over the batch",
        "why": "GPT-2's `inputs_embeds + position_embeds` and BERT's `embeddings + "
               "position_embeddings` add a [1, s, h] tensor to a [b, s, h] one; the engine's "
               "validate_outputs reduces the gradient to the input's shape (`sum_to_size`: an "
               "[s, h] aten::sum) before the embedding backward. The family hands the full "
               "gradient on (for ViT this same omission makes the gradients the wrong size, see"
               " above).",
        "fixed": "Ops::Add sums the gradient of an operand broadcast to the output to that "
                 "operand's size (`aten::sum`), for biases and position embeddings alike.",
        "counts": {
            "gpt2-fp32": {},
            "gpt2-bf16-amp": {},
            "gpt2-ckpt-bf16-amp": {},
            "bert-fp32": {},
            "bert-bf16-amp": {},
        },
    },
    {
        "key": "rmsnorm-backward",
        "verdict": FAMILY_BUG,
        "title": "RMSNorm backward: the weight-gradient product is twice too large",
        "why": "LlamaRMSNorm returns `weight * h.to(input_dtype)`; MulBackward0 computes the "
               "weight's gradient as `grad * h` (one [b, s, h] tensor in the product's dtype), "
               "reduced by the engine to [h] (aten::sum). The family allocated that product at "
               "twice its size (`bx * 2`).",
        "fixed": "The product is the product's size (`sim_.Bytes(y)`); what remains of the "
                 "norm's backward is `rmsnorm-backward-formulas` and `rmsnorm-grad-order` "
                 "(fixed since).",
        "counts": {
            "llama-fp32": {},
            "llama-bf16-amp": {},
            "llama-bf16": {},
            "llama-lora8-bf16-amp": {},
            "qwen2-fp32": {},
            "qwen2-bf16-amp": {},
        },
    },
    {
        "key": "rmsnorm-backward-formulas",
        "verdict": FAMILY_BUG,
        "title": "RMSNorm backward: the formulas' intermediates are missing",
        "why": "The family's RMSNorm backward ops allocate one tensor each where PyTorch's "
               "formulas allocate their intermediates: RsqrtBackward0 is `-0.5 * grad * "
               "result.pow(3)` (three [b, s, 1] tensors), MeanBackward1 `grad.expand(...) / n` "
               "(a [b, s, h] `div`; the family's `expand` of the same size), PowBackward0 `grad"
               " * (exponent * self.pow(exponent - 1))` (three [b, s, h] fp32 tensors, "
               "FunctionsManual.cpp pow_backward; the family's one `pow_backward`). All "
               "transient; counted by alignment (what is left unmatched in the norms' "
               "backward).",
        "fixed": "Ops::RmsNorm's PowBackward0 and RsqrtBackward0 make their formulas' "
                 "intermediates (pow, mul, mul; freed when the formula is done), and "
                 "MeanBackward1 is the `div` it is. (The class still takes what is left "
                 "unmatched in a norm's backward: a regression shows under its name.)",
        "counts": {
            "llama-fp32": {},
            "llama-bf16-amp": {},
            "llama-bf16": {},
            "llama-lora8-bf16-amp": {},
            "qwen2-fp32": {},
            "qwen2-bf16-amp": {},
        },
    },
    {
        "key": "rmsnorm-grad-order",
        "verdict": FAMILY_BUG,
        "title": "RMSNorm backward: the weight gradient is reduced before the input's gradient "
                 "is made",
        "why": "MulBackward0 of `weight * h` returns both gradients, the input's `grad * "
               "weight` first, then the weight's `grad * h`; the engine's validate_outputs then"
               " sums the latter to [h] (the `.grad`), so both [b, s, h] products and the sum "
               "are live together. The family's node makes the weight's product, reduces it and"
               " frees it before it makes the input's gradient: one [b, s, h] tensor fewer at "
               "that moment in every norm's backward. Same sizes, other order and lifetime (the"
               " sum is a gradient, so the temporaries' sequences still agree).",
        "fixed": "Ops::RmsNorm's MulBackward0 makes both products (the weight's, then the "
                 "input's gradient) before the weight gradient's `aten::sum`. (The check now "
                 "finds the family's `.grad` by name: it has no module, so before the fix the "
                 "check could not see the family's order at all.)",
        "counts": {
            "llama-fp32": {},
            "llama-bf16-amp": {},
            "llama-bf16": {},
            "llama-lora8-bf16-amp": {},
            "qwen2-fp32": {},
            "qwen2-bf16-amp": {},
        },
    },
    {
        "key": "gelu-new-backward",
        "verdict": NOT_MODELLED,
        "title": "GPT-2's gelu_new backward: the formulas' intermediates and dtype casts",
        "why": "NewGELUActivation is written out (`0.5 * x * (1 + tanh(sqrt(2/pi) * (x + "
               "0.044715 * pow(x, 3))))`); the family models each op's backward as one tensor, "
               "PyTorch's PowBackward0 allocates three (`grad * (3 * x.pow(2))`), and under "
               "autocast the engine casts the fp32 gradients back to bf16 for the bf16 operands"
               " (validate_outputs). All transient, [b, s, 4h] each.",
        "fixed": "GPT-2's written-out GELU has PyTorch's pow_backward (pow, mul, mul), and its "
                 "mixed-dtype multiply and add cast their bf16 operands' gradients back "
                 "(Ops::Mul, Ops::Add). (The class still takes what is left unmatched in the "
                 "MLP's backward at those sizes: a regression shows under its name.)",
        "counts": {
            "gpt2-fp32": {},
            "gpt2-bf16-amp": {},
            "gpt2-ckpt-bf16-amp": {},
        },
    },
    {
        "key": "rope-backward",
        "verdict": FAMILY_BUG,
        "title": "RoPE backward: rotate_half's backward (a negation, two zero-filled slice "
                 "gradients) and the q/k layout copies",
        "why": "rotate_half is `cat((-x[..., d/2:], x[..., :d/2]), -1)`. In backward "
               "CatBackward0 hands each input a narrow view of the gradient (no allocation), "
               "NegBackward0 allocates the half-size `neg`, and each SliceBackward0's "
               "`slice_backward` allocates a zero-filled tensor of the full input size and "
               "copies its slice in: a half-size and two full-size tensors per rotate_half. q's"
               " and k's gradients ([b, heads, s, d], contiguous) then need a copy "
               "(aten::clone) to go back through `.transpose(1, 2)` and `.view(b, s, h)` "
               "(reshape of a non-contiguous tensor). The family's Rotary backward now gives "
               "rotate_half one full-size `aten::slice_backward` (its CatBackward0) and passes "
               "the gradient through the views without a copy: per rotary application a "
               "half-size negation, one full-size gradient and one copy missing (transient).",
        "fixed": "Ops::Rotary is rotate_half as PyTorch runs it: two slice views (each "
                 "SliceBackward0 writes its gradient into zeros of x's size), a NegBackward0 (a"
                 " half-size negation) and a CatBackward0 that hands each input a view of the "
                 "gradient; LLaMA's q and k go through Ops::SplitHeads (.view(...).transpose(1,"
                 " 2)), whose backward copies the gradient back into the projection's layout "
                 "(aten::clone). (A regression shows as unexplained entries.)",
        "counts": {
            "llama-fp32": {},
            "llama-bf16-amp": {},
            "llama-bf16": {},
            "llama-lora8-bf16-amp": {},
            "qwen2-fp32": {},
            "qwen2-bf16-amp": {},
        },
    },
]

"""The per-rank estimate's whole-model parameter count against transformers' own models: each
config built by transformers on the meta device, ``sum(p.numel())``, must equal what
``vramscope predict --model config.json --json`` counts (its ``parallel.parameters``). The
mixture-of-experts and latent-attention configs are counted only by the per-rank estimate
(predict/parallel_layout.cc), so transformers is their independent check."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from conftest import require_binary  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BIN = str(Path(os.environ.get("VRAMSCOPE_BIN", str(REPO / "build" / "vramscope"))).resolve())

SMALL_DEEPSEEK_V3 = {
    "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "vocab_size": 1000,
    "hidden_size": 256, "intermediate_size": 512, "moe_intermediate_size": 64,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
    "n_shared_experts": 1, "n_routed_experts": 8, "num_experts_per_tok": 2,
    "first_k_dense_replace": 1, "q_lora_rank": 96, "kv_lora_rank": 32, "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16, "v_head_dim": 32, "max_position_embeddings": 512}

CONFIGS = {
    "deepseek_v3": SMALL_DEEPSEEK_V3,
    # q straight from the hidden states (DeepSeek-V2-Lite's q_lora_rank null), no dense layer,
    # two shared experts, a tied head
    "deepseek_v3_no_q_lora": dict(SMALL_DEEPSEEK_V3, q_lora_rank=None, first_k_dense_replace=0,
                                  n_shared_experts=2, tie_word_embeddings=True),
    "mixtral": {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"],
                "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
                "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
                "num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen2_moe": {"model_type": "qwen2_moe", "architectures": ["Qwen2MoeForCausalLM"],
                  "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
                  "moe_intermediate_size": 128, "shared_expert_intermediate_size": 512,
                  "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 8,
                  "num_experts": 6, "num_experts_per_tok": 2},
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_parameter_count_matches_transformers(name, tmp_path):
    require_binary(BIN)
    config = CONFIGS[name]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    hf_config = transformers.AutoConfig.for_model(
        **{k: v for k, v in config.items() if k != "architectures"})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config)
    expected = sum(p.numel() for p in model.parameters())
    done = subprocess.run([BIN, "predict", "--model", str(path), "--json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["parallel"]["parameters"] == expected

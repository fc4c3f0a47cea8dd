"""Small models for the example training runs, in plain PyTorch (no torchvision, no transformers).

Each entry of ``MODELS`` says how to build the model, how to make one synthetic batch on the CPU and
which loss to use, with the dimensions written out so that a report (or a test) can compute what the
memory should be. Changing a dimension changes the recorded goldens: keep them fixed.

  linear  one ``nn.Linear(1024, 1024)``, batch 64, MSE loss
  mlp     ``Linear(1024, 4096) -> GELU -> Linear(4096, 1024)``, batch 64, MSE loss (vramscope's
          built-in example pretends to be this run; see ../README.md)
  resnet18  ResNet-18 layout (basic blocks [2, 2, 2, 2], widths 64..512, 7x7 stem and max-pool),
          100 classes, 64x64 RGB images, batch 16, cross-entropy
  bert    BERT-style encoder: token + position embeddings, 4 post-LN layers, hidden 256, 4 heads,
          FFN 1024, GELU, dropout 0.1, attention written out (softmax of QK^T), masked-LM head
          (dense, GELU, LayerNorm, decoder to the vocabulary, not tied), vocab 8192, seq 128, batch 8;
          cross-entropy on about 15% of the positions (the others are -100)
  gpt     GPT-style decoder: token + position embeddings, 4 pre-LN blocks, hidden 256, 4 heads,
          MLP 1024, GELU, no dropout, causal attention with F.scaled_dot_product_attention,
          final LayerNorm, LM head tied to the token embedding, vocab 8192, seq 256, batch 8;
          next-token cross-entropy
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

# --------------------------------------------------------------------------------------- the MLP


class MLP(nn.Module):
    def __init__(self, d_in: int = 1024, d_hidden: int = 4096, d_out: int = 1024):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        h = self.fc1(x)
        h = self.act(h)
        return self.fc2(h)


# ------------------------------------------------------------------------------------- ResNet-18


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_ch: int, out_ch: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.downsample = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False), nn.BatchNorm2d(out_ch))

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    """The torchvision ResNet layout with basic blocks, written out."""

    def __init__(self, layers=(2, 2, 2, 2), widths=(64, 128, 256, 512), num_classes: int = 100):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        stages = []
        in_ch = widths[0]
        for i, (n, w) in enumerate(zip(layers, widths)):
            blocks = []
            for j in range(n):
                blocks.append(BasicBlock(in_ch, w, stride=2 if (i > 0 and j == 0) else 1))
                in_ch = w
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_ch, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


# ------------------------------------------------------------------------------------------ BERT


def init_transformer_weights(module: nn.Module, std: float = 0.02) -> None:
    """BERT/GPT-2 initialisation: N(0, 0.02) for linear and embedding weights, zero biases, LayerNorm
    at identity; it keeps the first losses near log(vocab)."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=std)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
        if isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


class BertSelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)

    def _split(self, t):
        b, s, _ = t.shape
        return t.view(b, s, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x):
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        probs = self.dropout(torch.softmax(scores, dim=-1))
        ctx = torch.matmul(probs, v)
        b, h, s, d = ctx.shape
        return ctx.transpose(1, 2).reshape(b, s, h * d)


class BertLayer(nn.Module):
    """Post-LN: x = LN(x + Attn(x)); x = LN(x + FFN(x))."""

    def __init__(self, hidden: int, heads: int, ffn: int, dropout: float):
        super().__init__()
        self.attention = BertSelfAttention(hidden, heads, dropout)
        self.attn_out = nn.Linear(hidden, hidden)
        self.attn_dropout = nn.Dropout(dropout)
        self.attn_norm = nn.LayerNorm(hidden)
        self.intermediate = nn.Linear(hidden, ffn)
        self.act = nn.GELU()
        self.output = nn.Linear(ffn, hidden)
        self.out_dropout = nn.Dropout(dropout)
        self.out_norm = nn.LayerNorm(hidden)

    def forward(self, x):
        x = self.attn_norm(x + self.attn_dropout(self.attn_out(self.attention(x))))
        return self.out_norm(x + self.out_dropout(self.output(self.act(self.intermediate(x)))))


class BertMLM(nn.Module):
    def __init__(self, vocab: int = 8192, max_len: int = 128, hidden: int = 256, layers: int = 4,
                 heads: int = 4, ffn: int = 1024, dropout: float = 0.1):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, hidden)
        self.pos_emb = nn.Embedding(max_len, hidden)
        self.emb_norm = nn.LayerNorm(hidden)
        self.emb_dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(BertLayer(hidden, heads, ffn, dropout) for _ in range(layers))
        self.head_dense = nn.Linear(hidden, hidden)
        self.head_act = nn.GELU()
        self.head_norm = nn.LayerNorm(hidden)
        self.decoder = nn.Linear(hidden, vocab)
        init_transformer_weights(self)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.emb_dropout(self.emb_norm(self.tok_emb(ids) + self.pos_emb(pos)))
        for layer in self.layers:
            x = layer(x)
        return self.decoder(self.head_norm(self.head_act(self.head_dense(x))))


# ------------------------------------------------------------------------------------------- GPT


class CausalSelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.c_proj = nn.Linear(hidden, hidden)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.c_attn(x).split(h, dim=2)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(b, s, h))


class GPTBlock(nn.Module):
    """Pre-LN: x = x + Attn(LN(x)); x = x + MLP(LN(x))."""

    def __init__(self, hidden: int, heads: int, mlp: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden)
        self.attn = CausalSelfAttention(hidden, heads)
        self.ln_2 = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, mlp), nn.GELU(), nn.Linear(mlp, hidden))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int = 8192, max_len: int = 256, hidden: int = 256, layers: int = 4,
                 heads: int = 4, mlp: int = 1024):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(max_len, hidden)
        self.blocks = nn.ModuleList(GPTBlock(hidden, heads, mlp) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied: one parameter, two names
        init_transformer_weights(self)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.wte(ids) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


# -------------------------------------------------------------------------------- the registry


def _mse(output, target):
    return F.mse_loss(output, target)


def _cross_entropy(output, target):
    return F.cross_entropy(output, target)


def _token_cross_entropy(logits, labels):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=-100)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    build: Callable[[], nn.Module]
    # (generator) -> (input, target), both on the CPU
    make_batch: Callable[[torch.Generator], tuple]
    loss: Callable
    loss_name: str
    batch_size: int
    dims: dict = field(default_factory=dict)


def _dense_batch(batch, d_in, d_out):
    def make(g):
        return (torch.randn(batch, d_in, generator=g), torch.randn(batch, d_out, generator=g))
    return make


def _image_batch(batch, size, classes):
    def make(g):
        return (torch.randn(batch, 3, size, size, generator=g),
                torch.randint(0, classes, (batch,), generator=g))
    return make


def _mlm_batch(batch, seq, vocab, mask_prob=0.15):
    def make(g):
        ids = torch.randint(0, vocab, (batch, seq), generator=g)
        labels = ids.clone()
        masked = torch.rand(batch, seq, generator=g) < mask_prob
        labels[~masked] = -100
        ids = ids.masked_fill(masked, vocab - 1)  # the last id plays [MASK]
        return ids, labels
    return make


def _lm_batch(batch, seq, vocab):
    def make(g):
        tokens = torch.randint(0, vocab, (batch, seq + 1), generator=g)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    return make


_BERT = dict(vocab=8192, max_len=128, hidden=256, layers=4, heads=4, ffn=1024, dropout=0.1)
_GPT = dict(vocab=8192, max_len=256, hidden=256, layers=4, heads=4, mlp=1024)

MODELS: dict[str, ModelSpec] = {
    "linear": ModelSpec(
        "linear", "one Linear(1024, 1024), batch 64, MSE",
        lambda: nn.Linear(1024, 1024), _dense_batch(64, 1024, 1024), _mse, "mse_loss", 64,
        dict(d_in=1024, d_out=1024, input_shape=[64, 1024], target_shape=[64, 1024])),
    "mlp": ModelSpec(
        "mlp", "Linear(1024, 4096) -> GELU -> Linear(4096, 1024), batch 64, MSE",
        lambda: MLP(1024, 4096, 1024), _dense_batch(64, 1024, 1024), _mse, "mse_loss", 64,
        dict(d_in=1024, d_hidden=4096, d_out=1024, input_shape=[64, 1024],
             target_shape=[64, 1024])),
    "resnet18": ModelSpec(
        "resnet18", "ResNet-18 (basic blocks), 100 classes, 64x64 images, batch 16, cross-entropy",
        lambda: ResNet((2, 2, 2, 2), (64, 128, 256, 512), 100), _image_batch(16, 64, 100),
        _cross_entropy, "cross_entropy", 16,
        dict(layers=[2, 2, 2, 2], widths=[64, 128, 256, 512], num_classes=100, image_size=64,
             input_shape=[16, 3, 64, 64], target_shape=[16])),
    "bert": ModelSpec(
        "bert", "BERT-style encoder, 4 post-LN layers, hidden 256, 4 heads, seq 128, batch 8, MLM",
        lambda: BertMLM(**_BERT), _mlm_batch(8, 128, _BERT["vocab"]), _token_cross_entropy,
        "cross_entropy(ignore_index=-100)", 8,
        dict(_BERT, seq=128, mask_prob=0.15, attention="explicit softmax(QK^T/sqrt(d))",
             norm="post-LN", mlm_head_tied=False, input_shape=[8, 128], target_shape=[8, 128])),
    "gpt": ModelSpec(
        "gpt", "GPT-style decoder, 4 pre-LN blocks, hidden 256, 4 heads, seq 256, batch 8, tied",
        lambda: GPT(**_GPT), _lm_batch(8, 256, _GPT["vocab"]), _token_cross_entropy,
        "cross_entropy", 8,
        dict(_GPT, seq=256, attention="F.scaled_dot_product_attention(is_causal=True)",
             norm="pre-LN", tied_embeddings=True, input_shape=[8, 256], target_shape=[8, 256])),
}

"""Small models for the tracer's --compile tests (tests/tracer/test_compile.py), also usable as
`vramscope predict --model tests/tracer/compile_models.py:mlp --compile`.

Every model's forward is the compiled region; the loss is the tracer's default
(`output.float().pow(2).mean()`, eager, outside the compiled graph)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

WIDTH = 256
SEQ = 32


def mlp():
    """A 2-layer MLP with LayerNorm."""
    return nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.LayerNorm(4 * WIDTH),
                         nn.Linear(4 * WIDTH, WIDTH))


class Chain(nn.Module):
    """Pointwise chains between two matmuls: eager autograd saves the input of every op of the
    chain; the partitioner saves the matmul's output and recomputes the chain in backward."""

    def __init__(self):
        super().__init__()
        self.up = nn.Linear(WIDTH, 4 * WIDTH)
        self.down = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x):
        h = self.up(x)
        h = torch.sin(h) * torch.sigmoid(h)
        h = torch.cos(h) + h * h
        return self.down(torch.tanh(h))


def chain():
    return Chain()


class Block(nn.Module):
    """A GPT-style pre-LN block (causal attention written out: softmax of masked scores, so
    that the same graph runs on any device), tied-free, with an embedding and a head."""

    def __init__(self, vocab=512, dim=WIDTH, heads=4):
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, dim)
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids):
        b, t = ids.shape
        x = self.embed(ids)
        q, k, v = self.qkv(self.ln1(x)).split(x.shape[-1], dim=-1)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
        mask = torch.ones(t, t, dtype=torch.bool, device=ids.device).tril()
        attn = F.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        y = (attn @ v).transpose(1, 2).reshape(b, t, -1)
        x = x + self.proj(y)
        x = x + self.out(F.gelu(self.fc(self.ln2(x))))
        return self.head(self.ln_f(x))


def gpt_block():
    return Block()


class Broken(nn.Module):
    """A forward with a graph break in the middle: Dynamo compiles two graphs."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(WIDTH, WIDTH)
        self.b = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        h = torch.relu(self.a(x))
        torch._dynamo.graph_break()
        return self.b(h)


def graph_break():
    return Broken()


def vramscope_inputs(batch_size, seq_len, image_size):
    return torch.randn(batch_size, WIDTH)


def gpt_inputs(batch_size, seq_len, image_size):
    return torch.randint(0, 512, (batch_size, SEQ))


def vramscope_loss(output, batch):
    """A loss whose backward saves nothing (the compiled graphs' saved set is then the whole
    step's, for the tests' comparison with the partitioner)."""
    return output.float().sum()

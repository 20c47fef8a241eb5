"""A small GPT-2 (nanoGPT's layout), compiled and run for a few steps: the script tests/crossrun records
in two processes, once as it is and once with planted changes (variant() writes them).

    python gpt2_script.py [STEPS]          # under `dynstep run --probe '*' --record R`

Weights come from each parameter's own name, so two variants of the model share the weights of the
layers they share, whatever else one of them adds.
"""

from __future__ import annotations

import sys
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F

N_LAYER = 2
ACT: dict[int, str] = {}   # layer -> activation replacing GELU (a planted change)


class CausalSelfAttention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.c_attn, self.c_proj, self.heads = nn.Linear(d, 3 * d), nn.Linear(d, d), heads

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, d: int, act: nn.Module) -> None:
        super().__init__()
        self.c_fc, self.act, self.c_proj = nn.Linear(d, 4 * d), act, nn.Linear(4 * d, d)

    def forward(self, x):
        h = self.c_fc(x)
        h = self.act(h)  # ACTIVATION LINE
        return self.c_proj(h)


class Block(nn.Module):
    def __init__(self, d: int, heads: int, act: nn.Module) -> None:
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(d), CausalSelfAttention(d, heads)
        self.ln_2, self.mlp = nn.LayerNorm(d), MLP(d, act)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


def activation(layer: int) -> nn.Module:
    return nn.ReLU() if ACT.get(layer) == "relu" else nn.GELU(approximate="tanh")


class GPT2(nn.Module):
    def __init__(self, vocab: int = 64, d: int = 32, heads: int = 2, n_layer: int = N_LAYER, ctx: int = 16) -> None:
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, d), wpe=nn.Embedding(ctx, d),
            h=nn.ModuleList([Block(d, heads, activation(i)) for i in range(n_layer)]), ln_f=nn.LayerNorm(d)))
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(t, device=idx.device))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def init(model: nn.Module) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
            noise = torch.randn(p.shape, generator=g)
            p.copy_(noise * 0.1 if p.dim() > 1 else (1.0 + 0.1 * noise if name.endswith("weight") else 0.1 * noise))


def main(steps: int) -> None:
    model = GPT2()
    init(model)
    model.eval()
    compiled = torch.compile(model)
    with torch.no_grad():
        for step in range(steps):
            idx = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(step))
            logits = compiled(idx)
            print(f"step {step}: logits mean {logits.mean().item():.6f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)

"""A transformer block driven by the DAP tests (the debuggee; its lines are breakpoint targets).

    python block_model.py [EXIT_CODE] [LOOP_SECONDS]

Runs the compiled block twice, then (LOOP_SECONDS > 0) keeps calling it so a client can pause it
while it runs, and exits with EXIT_CODE. It writes the compiled and the eager output (the eager
one with the change the test injects) to $DYNSTEP_TEST_OUT as a safetensors file.
"""

import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.ln = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        h = self.ln(x)
        q, k, v = self.qkv(h).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        attn = self.proj(att.transpose(1, 2).reshape(b, t, c))
        x = x + attn
        out = x + F.gelu(self.mlp(x))
        return out


def main() -> int:
    exit_code = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    loop = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    torch.manual_seed(0)
    block = Block().eval()
    x = torch.randn(2, 8, 16)
    compiled = torch.compile(block)
    with torch.no_grad():
        first = compiled(x)
        second = compiled(x)
        end = time.time() + loop
        while time.time() < end:
            compiled(x)
    print(f"block done: {tuple(first.shape)}", flush=True)
    out = os.environ.get("DYNSTEP_TEST_OUT")
    if out:
        from safetensors.torch import save_file

        save_file({"first": first.contiguous(), "second": second.contiguous(), "x": x}, out)
    return exit_code


if __name__ == "__main__":
    sys.exit(main())

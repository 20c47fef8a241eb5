"""Tensor statistics computed on the tensor's own device, with one transfer of a few numbers.

    stats_of(torch.randn(4, 4))  -> Stats(min=..., max=..., mean=..., std=..., absmax=..., nan=0, inf=0, count=16)
"""

from __future__ import annotations

import math

import torch

from ..core.records import Stats

_FLOAT8 = tuple(getattr(torch, name) for name in
                ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu")
                if hasattr(torch, name))


def unsupported_reason(x: torch.Tensor) -> str | None:
    """Why a tensor cannot be summarised (None when it can)."""
    if x.is_nested:
        return "nested tensor"
    if x.layout != torch.strided:
        return f"{x.layout} layout"
    if x.is_quantized:
        return "quantized tensor"
    if x.is_complex():
        return f"complex dtype {x.dtype}"
    if x.dtype in _FLOAT8:
        return f"float8 dtype {x.dtype}"
    if x.device.type == "meta":
        return "meta tensor"
    return None


def stats_of(x: torch.Tensor) -> Stats:
    x = x.detach()
    n = x.numel()
    if n == 0:
        return Stats(count=0)
    if x.is_floating_point():
        fast = _finite_fast_path(x, n)
        if fast is not None:
            return fast
    v = x.to(torch.float64)
    if x.is_floating_point():
        fin = torch.isfinite(v)
        nan_c = torch.isnan(v).sum()
        inf_c = (~fin).sum() - nan_c
        cnt = fin.sum()
        zero = torch.zeros((), dtype=torch.float64, device=v.device)
        fv = torch.where(fin, v, zero)
        mn = torch.where(fin, v, torch.full_like(zero, math.inf)).min()
        mx = torch.where(fin, v, torch.full_like(zero, -math.inf)).max()
        total = fv.sum()
        mean = total / cnt.clamp(min=1)
        var = torch.where(fin, (v - mean) ** 2, zero).sum() / (cnt - 1).clamp(min=1)
        absmax = fv.abs().max()
        numbers = torch.stack([mn, mx, mean, var.sqrt(), absmax, nan_c.double(), inf_c.double(),
                               cnt.double()]).tolist()
    else:
        mean = v.mean()
        std = v.std() if n > 1 else torch.zeros((), dtype=torch.float64, device=v.device)
        numbers = torch.stack([v.min(), v.max(), mean, std, v.abs().max()]).tolist() + [0.0, 0.0, float(n)]
    mn, mx, mean_f, std_f, absmax_f, nan_f, inf_f, cnt_f = numbers
    count = int(cnt_f)
    if count == 0:
        mn = mx = mean_f = std_f = absmax_f = math.nan
    elif count == 1:
        std_f = math.nan
    return Stats(min=mn, max=mx, mean=mean_f, std=std_f, absmax=absmax_f, nan=int(nan_f),
                 inf=int(inf_f), count=count)


def _finite_fast_path(x: torch.Tensor, n: int) -> Stats | None:
    """Few ops and two syncs when every value is finite (the common case); None otherwise."""
    xf = x if x.dtype in (torch.float32, torch.float64) else x.float()
    if not bool(torch.isfinite(xf).all()):
        return None
    mn, mx = torch.aminmax(xf)
    if n == 1:
        value = float(xf.reshape(()).item())
        return Stats(min=value, max=value, mean=value, std=math.nan, absmax=abs(value), count=1)
    std, mean = torch.std_mean(xf)
    lo, hi, m, sd = torch.stack([mn, mx, mean, std]).tolist()
    return Stats(min=lo, max=hi, mean=m, std=sd, absmax=max(abs(lo), abs(hi)), count=n)


def nonfinite_counts(x: torch.Tensor) -> tuple[int, int]:
    """(nan, inf) counts; (0, 0) for dtypes that cannot hold them."""
    if not x.is_floating_point() or x.numel() == 0:
        return 0, 0
    pair = torch.stack([torch.isnan(x).sum(), torch.isinf(x).sum()]).tolist()
    return int(pair[0]), int(pair[1])

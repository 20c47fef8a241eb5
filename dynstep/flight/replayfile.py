"""replay.json + replay.safetensors: one graph call a dump can replay, written and read back.

replay.json holds the graph (flight.graphio), the call (graph, step, call index), the inner compiler and
mode it ran under, each input (its placeholder, a tensor in replay.safetensors as ``input:<i>``, or a
scalar value) with `mutated` when its value is the one at the dump rather than at the call, the graph's
constant tensors (``attr:<name>``), the CPU generator's state when the graph draws random numbers
(``rng``), and notes saying what makes the replay inexact. Never pickle.

    files, why_not = replay_files(recorder, trigger)     # {} and the reason when there is nothing to replay
    call = read_replay(dump_path)                        # -> ReplayCall (or StorageError saying why not)
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..core.errors import StorageError
from ..recording.flight_facts import Trigger

if TYPE_CHECKING:
    from .source import DumpSource

FORMAT = 1


@dataclasses.dataclass(frozen=True)
class ReplayCall:
    """A graph call read back from a dump."""

    graph: str
    step: int
    call: int
    inner: str
    mode: str | None
    nodes: dict[str, Any]                 # graphio JSON
    inputs: tuple[Any, ...]               # in placeholder order
    requires_grad: tuple[bool, ...]
    mutated: tuple[str, ...]              # placeholder names whose value is the one at the dump
    attrs: dict[str, torch.Tensor]
    rng: torch.Tensor | None
    notes: tuple[str, ...]


def replay_files(recorder: "DumpSource", trigger: Trigger) -> tuple[dict[str, bytes | Callable[[Path], None]], str]:
    from safetensors.torch import save_file

    graph = _graph_for(recorder, trigger)
    if graph is None:
        return {}, "no graph call was kept (the flight option inputs=0, or no compiled call ran)"
    fg = recorder.graphs[graph]
    if fg.replay is None:
        return {}, f"the graph {graph} cannot be written for another process: {fg.why_not}"
    call = recorder.keeper.captured(graph)
    if call is None:
        return {}, f"no call of {graph} was kept"
    if call.missing:
        where = "; ".join(f"input {i}: {why}" for i, why in list(call.missing.items())[:3])
        return {}, f"inputs of the last call of {graph} could not be kept ({where})"
    # the captured inputs are the keeper's own CPU copies (flight.inputs), read here and written as they are
    tensors = {f"input:{i}": t.detach().contiguous() for i, t in call.tensors.items()}
    tensors.update({f"attr:{k}": v.detach().to("cpu").clone().contiguous() for k, v in fg.attrs.items()})
    if call.rng is not None:
        tensors["rng"] = call.rng.clone()
    names = [n["name"] for n in fg.replay["nodes"] if n["op"] == "placeholder"]
    meta = {"format": FORMAT, "graph": graph, "step": call.step, "call": call.call, "inner": fg.inner, "mode": fg.mode,
            "inputs": [_input(i, name, call) for i, name in enumerate(names)], "rng": call.rng is not None,
            "notes": _notes(call, names, fg.rng), "nodes": fg.replay["nodes"]}
    return {"replay.json": json.dumps(meta).encode(),
            "replay.safetensors": lambda path: save_file(tensors, str(path))}, ""


def _graph_for(recorder: "DumpSource", trigger: Trigger) -> str | None:
    kept = recorder.keeper.last
    if trigger.graph in kept:
        return trigger.graph
    return next((g for g in recorder.graphs if g in kept), None)


def _input(i: int, name: str, call: Any) -> dict[str, Any]:
    if i in call.tensors:
        t = call.tensors[i]
        grad = call.requires_grad[i] if i < len(call.requires_grad) else False
        return {"name": name, "kind": "tensor", "mutated": i in call.mutated,
                "requires_grad": grad and t.is_floating_point()}
    return {"name": name, "kind": "scalar", "value": call.scalars.get(i)}


def _notes(call: Any, names: list[str], rng: bool) -> list[str]:
    notes = []
    if call.mutated:
        shown = ", ".join(names[i] for i in call.mutated[:4]) + (" ..." if len(call.mutated) > 4 else "")
        notes.append(f"{len(call.mutated)} input(s) were changed in place after the call before they could be kept "
                     f"({shown}): the replay uses their values at the dump, not at the call")
    if rng:
        notes.append("the graph draws random numbers: the replay restores the CPU generator's state of the call and "
                     "runs Inductor with fallback_random, so eager and compiled draw the same numbers (not "
                     "necessarily those the original compiled run drew)")
    return notes


def read_replay(path: str | Path) -> ReplayCall:
    from safetensors.torch import load

    path = Path(path)
    meta_file, data_file = path / "replay.json", path / "replay.safetensors"
    if not meta_file.is_file() or not data_file.is_file():
        raise StorageError(f"{path}: this dump holds no graph call to replay ({_why_not(path)})")
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        tensors = load(data_file.read_bytes())
    except (OSError, ValueError) as exc:
        raise StorageError(f"{path}: replay.json / replay.safetensors cannot be read ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise StorageError(f"{path}: replay.json is not a replay this dynstep reads (format {meta.get('format')!r})")
    inputs, grads, mutated = [], [], []
    for i, spec in enumerate(meta["inputs"]):
        if spec["kind"] == "tensor":
            inputs.append(tensors[f"input:{i}"].requires_grad_(bool(spec["requires_grad"])))
            mutated += [spec["name"]] if spec["mutated"] else []
        else:
            inputs.append(spec.get("value"))
        grads.append(bool(spec.get("requires_grad", False)))
    attrs = {k.removeprefix("attr:"): v for k, v in tensors.items() if k.startswith("attr:")}
    return ReplayCall(meta["graph"], meta["step"], meta["call"], meta["inner"], meta.get("mode"),
                      {"nodes": meta["nodes"]}, tuple(inputs), tuple(grads), tuple(mutated), attrs, tensors.get("rng"),
                      tuple(meta.get("notes", ())))


def _why_not(path: Path) -> str:
    try:
        return json.loads((path / "flight.json").read_text(encoding="utf-8")).get("replay") or "no replay.json"
    except (OSError, ValueError, AttributeError):
        return "not a flight recorder's dump"

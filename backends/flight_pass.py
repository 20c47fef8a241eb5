"""The flight recorder's pass: its probes in a Dynamo graph, and the wrapper that counts steps.

For ``options={"flight": ...}`` every value the flight's `select` picks (default: every node) gets a
`dynstep::probe` with the `summary` and `nan` actions, and the gradient flowing into it a probe in the
backward graph (superstep's gradient taps), all owned by the flight recorder (`Site.owner = "flight"`):
their hits go to its rings, not to sessions, and a non-finite one is handed to it instead of raised.
The graph as Dynamo gave it is kept as JSON (before any probe), so a dump can replay one of its calls.

The compiled graph is wrapped: each call tells the recorder a graph is about to run (the step clock,
the inputs kept by reference) and an exception leaving it is the `exception` trigger.

    flight = instrument(gm, opts, graph_id, inner_has_aot=True)   # before the inner compiler
    compiled = wrap(compiled, flight)                              # after it
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import torch.fx

from dynstep.core.errors import OptionsError
from dynstep.core.options import Options
from dynstep.flight.graphio import UnsupportedGraph, attrs, graph_json
from dynstep.flight.recorder import FlightGraph, FlightRecorder, start
from dynstep.graph import info as gi
from dynstep.graph import selectors as sel

from . import probe_pass

_RANDOM = re.compile(r"^(rand\w*|\w*dropout\w*|bernoulli|normal|multinomial|uniform|poisson|exponential|rrelu)$")


@dataclasses.dataclass(frozen=True)
class Flight:
    recorder: FlightRecorder
    graph: str


def instrument(gm: torch.fx.GraphModule, opts: Options, graph_id: str, *, inner_has_aot: bool) -> Flight:
    flight = opts.flight
    assert flight is not None
    selectors = tuple(sel.parse_all(flight.select))
    aten = [s.text for s in selectors if s.aten_level]
    if aten:
        raise OptionsError(f"option 'flight': 'select' takes selectors of the graph as Dynamo gives it; {aten} name "
                           "aten ops, which exist only after AOTAutograd (use op:linear, op:layer_norm, module:..., *)")
    recorder = start(flight)
    replay, why_not, attrs = _portable(gm)
    plan = probe_pass.ProbePlan(selectors=selectors, actions=("summary", "nan"), capacity=flight.steps + 1, grads=True,
                                nan_mode=None, graph_id=graph_id, inner_has_aot=inner_has_aot, owner="flight")
    sites = probe_pass.insert_probes(gm, plan, aten_level=False)
    recorder.add_graph(FlightGraph(graph_id, tuple(s.id for s in sites), replay, why_not, attrs, _draws_random(gm),
                                   opts.inner_name if isinstance(opts.inner, str) else "", opts.mode), sites)
    return Flight(recorder, graph_id)


def _portable(gm: torch.fx.GraphModule) -> tuple[dict[str, Any] | None, str, dict]:
    """The graph as JSON for a replay in another process, or None and why not."""
    try:
        return graph_json(gm), "", attrs(gm)
    except UnsupportedGraph as exc:
        return None, str(exc), {}


def _draws_random(gm: torch.fx.GraphModule) -> bool:
    return any(_RANDOM.match(gi.op_name(n).rsplit(".", 1)[-1].rstrip("_")) for n in gm.graph.nodes
               if gi.is_value_node(n))


def wrap(compiled: Callable[..., Any], flight: Flight) -> Callable[..., Any]:
    """`compiled`, telling the recorder about each call. Dynamo calls a backend's result with the graph's
    inputs as arguments (torch/_dynamo/output_graph.py), whatever `_boxed_call` the inner result carries."""
    recorder, graph = flight.recorder, flight.graph

    def flight_call(*args: Any) -> Any:
        recorder.before_call(graph, args)
        try:
            out = compiled(*args)
        except Exception as exc:
            recorder.on_exception(exc)
            raise
        recorder.after_call(graph)
        return out

    return flight_call

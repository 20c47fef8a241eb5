"""Two compiled variants of a graph with stop points: run the one with stop points only when the
stepper could stop in it.

    fn = two_variants(stepping_fn, plain_fn, sites)
"""

from __future__ import annotations

from ..core.sites import Site
from .stepper import STEPPER


class TwoVariants:
    """Run the graph with stop points only when the stepper could stop in it, else the plain graph.

    Step points after every node cost several times the graph (each is an op call Inductor cannot
    fuse across). A graph whose pause selectors are cleared, a detached stepper (no terminal, no
    commands), or `continue` with no pause left in the graph: the plain variant runs, at the cost
    of the graph without dynstep. Stepping (`s`, `n`), a live pause selector or a `break` on one
    of its nodes selects the variant with stop points for the next call.
    """

    def __init__(self, stepping, quiet, sites: list[Site]) -> None:
        self.stepping, self.quiet, self._stepper = stepping, quiet, STEPPER
        self.ids = frozenset(s.id for s in sites)
        self.pauses = {s.id: s.probe for s in sites if s.actions == ("pause",)}
        self.graph_id = sites[0].graph if sites else ""
        # Dynamo wraps what a backend returns and names the wrapper after it (tracebacks, views)
        self.__name__ = getattr(stepping, "__name__", "forward")
        self.__qualname__ = getattr(stepping, "__qualname__", self.__name__)

    def __call__(self, *args):
        stepper = self._stepper
        want = stepper.may_stop(self.ids, self.pauses)
        coord = stepper.coordinator
        if coord is None:
            return (self.stepping if want else self.quiet)(*args)
        # every rank of a distributed job runs the same variant (the same stop points)
        mine = coord.may_pause()
        if not coord.agree(want and mine, mine and stepper.every_node(self.ids)):
            return self.quiet(*args)
        try:
            return self.stepping(*args)
        finally:
            coord.end_call()

    def __repr__(self) -> str:
        return f"<dynstep graph {self.graph_id}: {self.stepping!r} while stepping, else {self.quiet!r}>"


def two_variants(stepping, quiet, sites: list[Site]) -> TwoVariants:
    return TwoVariants(stepping, quiet, sites)

"""The composition root: the one place that decides which front ends answer the engine.

`install()` fills the slots of `dynstep.core.wiring` with the terminal front ends: the default
event sink (`console.default_sink`: probe prints and warnings on stderr, stepper events through
the REPL's renderer), the stop front-end factory (`frontends.make_frontend`: scripted commands,
pdb, the terminal REPL), the diff's and the run comparison's renderers (the rich table, the HTML page) and how a
distributed job's coordinator is made (`jobs.coordinator.for_job`). It is the
``terminal`` entry of the ``dynstep.frontends`` entry-point group (pyproject.toml), which the
engine loads the first time it needs a front end; `dynstep`'s CLI calls it directly. What a
program installed before (an editor's front end) is kept: ``replace=False``.

    from dynstep.front import wiring
    wiring.install()
"""

from __future__ import annotations

from ..core import wiring


def install() -> None:
    from ..jobs.coordinator import for_job
    from . import compare_html, compare_show, console, diff_html, diff_show, frontends

    wiring.install_sink(console.default_sink, replace=False)
    wiring.install_frontend_factory(frontends.make_frontend, replace=False)
    wiring.register_renderer("diff.show", diff_show.show, replace=False)
    wiring.register_renderer("diff.html", diff_html.render, replace=False)
    wiring.register_renderer("compare.show", compare_show.show, replace=False)
    wiring.register_renderer("compare.html", compare_html.render, replace=False)
    wiring.install_coordinator_factory(for_job, replace=False)   # dynstep.breakpoint()'s compile-time stop

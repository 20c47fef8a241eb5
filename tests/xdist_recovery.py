"""pytest-xdist's `--dist loadfile` scheduler, made to survive a worker that dies (tests/conftest.py installs it).

A worker dies when a test crashes the interpreter (a segfault in native code) or when pytest-timeout ends
a test that ran past its limit (`timeout_method = "thread"` dumps every stack, then exits the worker).
pytest-xdist 3.8.0 then replaces the worker, but its `LoadScopeScheduling` (which `loadfile` is) can leave
the whole run waiting forever at its end, with every worker idle (a CI run once sat at 98% until its
time limit):

- `remove_node` puts every file the dead worker was given back on the queue, also the ones it had
  finished; the replacement is later sent an empty batch for each, which never completes and so never
  asks for more work (pytest-xdist#1378, #1313);
- a worker runs a test only once it knows the next one, or that none will come; a replacement given a
  single test and nothing after it waits for ever (pytest-xdist#1327);
- the test the worker died in is run again, and a test that crashes the interpreter crashes the
  replacement too (pytest-xdist#1371).

`RecoveringLoadFile` requeues only the tests not run yet (the crashed test is reported failed once, by
xdist, and not run again), puts them first, and never leaves a worker one test short: it gets more
work or its shutdown. Everything else is xdist's own. Drop this once a pytest-xdist release has the
fixes (then `tests/test_xdist_recovery.py` still checks the behaviour).
"""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadFileScheduling


class RecoveringLoadFile(LoadFileScheduling):
    def remove_node(self, node: Any) -> str | None:
        workload = self.assigned_work.pop(node)
        unfinished = {scope: unit for scope, unit in workload.items() if not all(unit.values())}
        if not unfinished:
            return None
        crashed = next(nodeid for unit in unfinished.values() for nodeid, done in unit.items() if not done)
        unfinished[self._split_scope(crashed)][crashed] = True   # xdist reports it as the crash: not again
        for scope, unit in reversed(list(unfinished.items())):
            if not all(unit.values()):
                self.workqueue[scope] = unit
                self.workqueue.move_to_end(scope, last=False)
        for other in self.assigned_work:
            self._reschedule(other)
        return crashed

    def _reschedule(self, node: Any) -> None:
        super()._reschedule(node)              # at most one more file, as xdist does
        if node.shutting_down:
            return
        while self.workqueue and self._pending_of(self.assigned_work[node]) < 2:
            self._assign_work_unit(node)       # a worker waits for the test after the one it runs next
        if not self.workqueue:
            node.shutdown()                    # ... or to be told that none comes

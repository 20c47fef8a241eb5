"""Every stage of every compile, as torch writes it into its structured trace (what TORCH_TRACE and
tlparse show), kept in process: Dynamo's graph, AOTAutograd's graphs, Inductor's post-grad graph and
output code, and the code objects Dynamo wrote.

Capturing is on while `dynstep run` runs (`capturing()`, nestable) and from the first graph compiled
with stop points on (`keep`; `step_bytecode()` compiles every graph so): torch computes these texts
whenever anything listens to its trace, which the compile log already does under `dynstep run`.
At most `LIMIT` compiles are kept, the oldest dropped first.

    with capturing():
        torch.compile(f)(x)
    STAGES.of("0/0")            -> [Stage("dynamo", ...), Stage("aot", ...), Stage("inductor", ...), ...]
    STAGES.code_of("0/0")       -> the code object Dynamo wrote for that compile (the "bytecode" stage)
"""

from __future__ import annotations

import collections
import contextlib
import threading
import types
from collections.abc import Callable, Iterator
from .. import _compat
from .stage import Stage

LIMIT = 500
_BY_KIND = {"dynamo_output_graph": "dynamo", "aot_joint_graph": "joint", "aot_forward_graph": "aot",
            "aot_inference_graph": "aot", "aot_backward_graph": "aot-backward"}


class StageStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stages: collections.OrderedDict[str, list[Stage]] = collections.OrderedDict()
        self._codes: dict[str, list[types.CodeType]] = {}
        self._functions: dict[str, str] = {}
        self._users = 0
        self._kept = False
        self._stops: list[Callable[[], None]] = []

    # -- what was captured ---------------------------------------------------------------------
    def of(self, compile_id: str) -> list[Stage]:
        with self._lock:
            return list(self._stages.get(compile_id, ()))

    def compile_ids(self) -> list[str]:
        with self._lock:
            return list(self._stages)

    def function_of(self, compile_id: str) -> str:
        """The user's function the compile is of ("" when its start was not seen)."""
        return self._functions.get(compile_id, "")

    def code_of(self, compile_id: str) -> list[types.CodeType]:
        with self._lock:
            return list(self._codes.get(compile_id, ()))

    def add(self, stage: Stage) -> None:
        with self._lock:
            stages = self._stages.setdefault(stage.compile_id, [])
            self._stages.move_to_end(stage.compile_id)
            variant = sum(s.name == stage.name for s in stages)
            function = stage.function or self._functions.get(stage.compile_id, "")
            stages.append(Stage(stage.name, stage.compile_id, stage.text, variant, stage.path, function))
            while len(self._stages) > LIMIT:
                old, _ = self._stages.popitem(last=False)
                self._codes.pop(old, None)

    def rename_last(self, compile_id: str, old: str, new: str) -> None:
        """The newest `old` stage of the compile is really a `new` one (a post-grad graph turns out backward)."""
        with self._lock:
            stages = self._stages.get(compile_id, [])
            for i in range(len(stages) - 1, -1, -1):
                if stages[i].name == old:
                    variant = sum(s.name == new for s in stages)
                    s = stages[i]
                    stages[i] = Stage(new, s.compile_id, s.text, variant, s.path, s.function)
                    return

    # -- listening -----------------------------------------------------------------------------
    def acquire(self) -> None:
        with self._lock:
            self._users += 1
            if self._users > 1:
                return
        self._stops = [_compat.add_listener(self._on_record)]
        self._stops.append(_compat.register_dynamo_bytecode_hook(self._on_code).remove)

    def release(self) -> None:
        with self._lock:
            self._users = max(0, self._users - 1)
            stops, self._stops = (self._stops, []) if self._users == 0 else ([], self._stops)
        for stop in stops:
            stop()

    def keep(self, compile_id: str, dynamo_text: Callable[[], str], function: str = "") -> None:
        """A graph with stop points: capture from now on (for `code` at its stops), and its Dynamo graph,
        whose trace record came before anything listened."""
        if not self._kept:
            self._kept = True
            self.acquire()
        if function:
            self._functions[compile_id] = function
        if not any(s.name == "dynamo" for s in self.of(compile_id)):
            self.add(Stage("dynamo", compile_id, dynamo_text()))

    def _on_record(self, record: _compat.TraceRecord) -> None:
        cid = record.compile_id.split("_", 1)[0]   # "0/0_1": the attempt after a restart is still compile 0/0
        if record.kind == "dynamo_output_graph" and any(s.name == "dynamo" for s in self.of(cid)):
            with self._lock:   # a restarted attempt reached its graph: what the earlier one left goes
                self._stages.pop(cid, None)
        if record.kind == "dynamo_start" and cid:
            with self._lock:   # a compile id seen again (after torch._dynamo.reset()): a new compile
                self._stages.pop(cid, None)
                self._codes.pop(cid, None)
                self._functions[cid] = record.stack[-1][2] if record.stack else ""
            return
        name = _BY_KIND.get(record.kind) or ("post-grad" if record.name == "inductor_post_grad_graph" else "")
        if record.kind == "inductor_output_code":
            backward = "_backward']" in record.payload.split("\n", 1)[0]
            name = "inductor-backward" if backward else "inductor"
            if backward:
                self.rename_last(cid, "post-grad", "post-grad-backward")
        if name and cid and record.payload:
            self.add(Stage(name, cid, record.payload, path=record.path))

    def _on_code(self, code: types.CodeType) -> None:
        cid = _compat.current_compile_id()
        with self._lock:
            self._codes.setdefault(cid, []).append(code)


STAGES = StageStore()


@contextlib.contextmanager
def capturing() -> Iterator[StageStore]:
    """Capture every stage compiled inside the block (nestable)."""
    STAGES.acquire()
    try:
        yield STAGES
    finally:
        STAGES.release()


def compile_id_of_graph(graph_id: str) -> str:
    """``forward[0/1]`` -> ``0/1`` (dynstep's graph ids name the compile in brackets)."""
    head, _, rest = graph_id.rpartition("[")
    return rest.rstrip("]") if head else ""

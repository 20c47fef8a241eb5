"""What one stage of a compile is, as data: its text and, per line, the nodes and user line behind it.

    Stage("aot", "0/0", text)                    # the AOT forward graph of compile 0/0
    LineMark(line=12, nodes=("mm",), source="model.py:33")
    StageShown(...)                              # what `code [stage]` shows at a stop

Stage names (what `code NAME` takes, and the dump's file names):

    dynamo               the FX graph Dynamo traced (what the backend receives)
    joint                AOTAutograd's joint forward+backward graph
    aot, aot-backward    AOTAutograd's forward (or inference) and backward graphs, aten ops
    post-grad, post-grad-backward   Inductor's graphs after its post-grad passes
    inductor, inductor-backward     Inductor's output code (the Python wrapper module that runs)
    bytecode             the code Dynamo wrote for the frame, as Python (dynstep's decompiler)
"""

from __future__ import annotations

import dataclasses

STAGE_NAMES = ("dynamo", "joint", "aot", "aot-backward", "post-grad", "post-grad-backward", "inductor",
               "inductor-backward", "bytecode")
TITLES = {"dynamo": "Dynamo's FX graph", "joint": "AOTAutograd's joint graph", "aot": "AOTAutograd's forward graph",
          "aot-backward": "AOTAutograd's backward graph", "post-grad": "Inductor's post-grad graph (forward)",
          "post-grad-backward": "Inductor's post-grad graph (backward)", "inductor": "Inductor's output code (forward)",
          "inductor-backward": "Inductor's output code (backward)", "bytecode": "the bytecode Dynamo wrote, as Python"}


@dataclasses.dataclass(frozen=True)
class LineMark:
    """What one line of a stage's text stands for."""

    line: int                  # 1-based, in the stage's text
    nodes: tuple[str, ...]     # FX nodes (for Inductor's code: the Dynamo nodes the kernel computes)
    source: str                # the user's "file:line" ("" when not known)


@dataclasses.dataclass(frozen=True)
class Stage:
    """One stage of one compile, as torch produced it."""

    name: str                  # one of STAGE_NAMES
    compile_id: str            # "0/0"
    text: str
    variant: int = 0           # the nth text of this stage in the compile (superstep compiles a graph with stop points too)
    path: str = ""             # the file the text also lives in (Inductor's wrapper module), "" if none
    function: str = ""         # the user's function the compile is of ("" when not known)

    @property
    def title(self) -> str:
        more = f", variant {self.variant}" if self.variant else ""
        return f"{TITLES.get(self.name, self.name)} · compile {self.compile_id}{more}"


@dataclasses.dataclass(frozen=True)
class StageShown:
    """`code [stage]` at a stop: a stage's lines (all, or those around the current node), marks, what else exists."""

    name: str
    title: str
    lines: tuple[tuple[int, str], ...]      # (line number, text)
    marked: tuple[int, ...]                 # lines standing for the current node / instruction
    notes: tuple[tuple[int, str], ...]      # (line number, "nodes · user line") for lines that have them
    available: tuple[str, ...]              # every stage this compile has
    path: str = ""
    note: str = ""

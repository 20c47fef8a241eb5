"""Every stage of what was compiled as DAP sources (`loadedSources`): an editor lists them under
"Loaded Scripts" and opens them like files, read from the debugged process.

Each stage of each compile (`dynstep.stages`: Dynamo's graph, AOTAutograd's graphs, the post-grad
graph, Inductor's output code with every kernel launch tied to its nodes and user line, Dynamo's
bytecode as Python) gets a `sourceReference` that stays the same for the session.

    loaded_sources(server.sources)   -> [{"name": "f[0_0].inductor.py", "sourceReference": 7, "origin": ...}]
"""

from __future__ import annotations

from typing import Any

from ..stages.capture import STAGES
from ..stages.dump import annotated_text
from ..stages.view import stages_of
from .sources import Sources, virtual_name


def loaded_sources(sources: Sources) -> list[dict[str, Any]]:
    out = []
    for compile_id in STAGES.compile_ids():
        label = f"{STAGES.function_of(compile_id) or 'graph'}[{compile_id}]"
        for stage in stages_of(compile_id):
            kind = stage.name + (f"-{stage.variant}" if stage.variant else "")
            name = virtual_name(label, kind)
            ref = sources.add(f"stage:{compile_id}:{kind}", name, annotated_text(stage, compile_id))
            origin = stage.title + (f" · runs as {stage.path}" if stage.path else "")
            out.append({"name": name, "sourceReference": ref, "origin": origin})
    return out

import pytest
import torch

from dynstep.graph import selectors as S
from dynstep.core.errors import SelectorError


def capture_graph(model, *args):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch.compile(model, backend=backend)(*args)
    return graphs


@pytest.mark.parametrize("text", ["op:", "bogus:x", "line:model.py", "line:model.py:x", "module", ""])
def test_malformed_selectors_show_the_grammar(text):
    with pytest.raises(SelectorError) as info:
        S.parse(text)
    assert "selector grammar" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_parse_kinds():
    assert S.parse("*").kind == "*"
    assert S.parse("line:src/model.py:57") == S.Selector("line", "src/model.py", "line:src/model.py:57", 57)
    assert S.parse("op:aten.mm").aten_level and not S.parse("op:mm").aten_level


def test_module_glob_is_per_component():
    rx = S.module_glob_regex("blocks.*.mlp")
    assert rx.match("blocks.0.mlp") and not rx.match("blocks.0.x.mlp") and not rx.match("blocks.0.mlp.fc")
    assert S.module_glob_regex("**.fc").match("blocks.1.mlp.fc")


def test_selectors_on_a_transformer(gpt):
    model, idx = gpt
    (gm,) = capture_graph(model, idx)
    pick = lambda text: S.select(gm.graph, [S.parse(text)], aten_level=False)  # noqa: E731

    mlps = pick("module:blocks.*.mlp")
    assert [m.module for m in mlps] == ["blocks.0.mlp", "blocks.1.mlp"]
    assert all(m.source.startswith("model.py:") for m in mlps)
    assert len(pick("op:layer_norm")) == 5          # 2 per block + ln_f
    assert len(pick("op:linear")) == 9              # qkv, c_proj, fc, proj per block + head
    inside = pick("in:blocks.0.attn")
    assert inside and all(m.module.startswith("blocks.0.attn") for m in inside)
    every = pick("*")
    assert len(every) > len(inside)
    # line: one value per execution; the loop over blocks runs the line twice
    loop_line = next(f for f in __import__("dynstep.graph.info", fromlist=["x"]).user_frames(mlps[0].node)
                     if "block(x)" in f.code)
    per_exec = pick(f"line:model.py:{loop_line.line}")
    assert len(per_exec) == 2
    assert [m.module for m in per_exec] == ["blocks.0", "blocks.1"]


def test_candidates_for_unmatched(gpt):
    model, idx = gpt
    (gm,) = capture_graph(model, idx)
    assert "blocks.0.mlp" in S.candidates(gm.graph, S.parse("module:blocks.0.mpl"))
    assert any("layer_norm" in c for c in S.candidates(gm.graph, S.parse("op:layernorm")))

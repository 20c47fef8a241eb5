"""Module paths are the paths in the compiled model, whatever form Dynamo gives its root (issue 25).

Dynamo names modules from the frame it compiles: `L['self']` for a plain forward, `L['args'][0]`
under a decorator's `*args` (transformers' @deprecate_kwarg), `L['fn'].args[0]` for a partial
(accelerate's hooks), `L['module']`, `..._old_forward.__self__` ... Each case here compiles for
real and checks `records("module:...")` against forward hooks on the model.
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn as nn

import dynstep
from dynstep.graph import roots


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x).relu()


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = nn.ModuleList([Block(), Block()])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x * 2


def wraps_any_call(fn):
    """What transformers' @deprecate_kwarg does: a `def wrapped(*args, **kwargs)` around forward."""
    @functools.wraps(fn)
    def wrapped_func(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapped_func


class DecoratedNet(Net):
    @wraps_any_call
    def forward(self, x):
        return super().forward(x)


def accelerate_hook(module: nn.Module) -> nn.Module:
    """accelerate.hooks.add_hook_to_module: forward replaced by a partial of a closure over _old_forward."""
    module._old_forward = module.forward

    def new_forward(module, *args, **kwargs):
        return module._old_forward(*args, **kwargs)

    module.forward = functools.update_wrapper(functools.partial(new_forward, module), module._old_forward)
    return module


def hooked(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    seen: dict[str, torch.Tensor] = {}
    handles = [m.register_forward_hook(lambda m, i, o, n=n: seen.setdefault(n, o.detach().clone()))
               for n, m in model.named_modules() if n]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return seen


def recorded(compiled, x: torch.Tensor, selector: str = "module:layers.*") -> dict[str, torch.Tensor]:
    with dynstep.session() as s, torch.no_grad():
        compiled(x)
    return {snap.module: snap.tensor for snap in s.records(selector)}


OPTIONS = {"inner": "eager", "probe": ["module:layers.*"], "actions": ["record"]}
X = torch.randn(2, 8)


def _check(got: dict[str, torch.Tensor], model: nn.Module) -> None:
    want = hooked(model, X)
    assert sorted(got) == ["layers.0", "layers.1"]
    for name, value in got.items():
        torch.testing.assert_close(value, want[name])


@pytest.mark.parametrize("how", ["module", "forward", "kwargs"])
def test_module_paths_gain_no_0_prefix_when_forward_is_decorated(how):
    """Issue 25 defect 1: under a `*args` decorator Dynamo's root is L['args'][0]; paths were `0.layers.0`."""
    model = DecoratedNet().eval()
    target = model.forward if how == "forward" else model
    compiled = torch.compile(target, backend="superstep", options=dict(OPTIONS))
    got = recorded(lambda x: compiled(x=x) if how == "kwargs" else compiled(x), X)
    _check(got, model)


def test_module_paths_under_accelerate_style_hooks_on_the_root_and_on_a_child():
    model = Net().eval()
    accelerate_hook(model)
    accelerate_hook(model.layers[0])     # its modules are reached through `_old_forward.__self__`
    _check(recorded(torch.compile(model, backend="superstep", options=dict(OPTIONS)), X), model)
    torch._dynamo.reset()
    _check(recorded(torch.compile(model.forward, backend="superstep", options=dict(OPTIONS)), X), model)


def test_module_paths_of_a_compiled_bound_method_and_a_function_taking_the_model():
    model = Net().eval()
    _check(recorded(torch.compile(model.forward, backend="superstep", options=dict(OPTIONS)), X), model)
    torch._dynamo.reset()
    compiled = torch.compile(lambda m, x: m(x), backend="superstep", options=dict(OPTIONS))
    _check(recorded(lambda x: compiled(model, x), X), model)


def test_the_decorated_llama_forward_names_model_layers_and_pauses_there():
    """The Llama case of defect 1: `module:model.layers.*` recorded nothing and a pause never stopped."""
    transformers = pytest.importorskip("transformers")
    from dynstep.core.events import Stopped, use_sink

    cfg = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=64, max_position_embeddings=32)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 64, (2, 8))
    cm = torch.compile(model, backend="superstep", options={
        "inner": "eager", "probe": ["module:model.layers.*"], "actions": ["record"],
        "pause": ["module:model.norm"], "commands": "set value = value * 0; c"})
    events: list[object] = []
    with dynstep.session() as s, use_sink(events.append), torch.no_grad():
        out = cm(ids, use_cache=False).logits
    assert sorted({r.module for r in s.records("module:model.layers.*")}) == ["model.layers.0", "model.layers.1"]
    assert [e.site.module for e in events if isinstance(e, Stopped)] == ["model.norm"]
    with torch.no_grad():
        expected = model.lm_head(torch.zeros(2, 8, 32))
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("fqn, path", [
    ("L['self'].layers[0].fc", "layers.0.fc"),
    ("L['self'].__dict__['_modules']['base_model'].model.layers.0", "base_model.model.layers.0"),   # PEFT
    ("L['s'].layers.0._old_forward.__self__.fc", "layers.0.fc"),                                   # accelerate
    ("L['self'].module._fsdp_wrapped_module.layers.0", "module.layers.0"),
    ("G['model'].blocks.1", "blocks.1"),
])
def test_names_read_without_a_frame(fqn, path):
    assert roots.plain_path(fqn) == path


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 8)

    def forward(self, x):
        return self.down(self.up(x).relu())      # mlp's return is down's return


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.mlp = Mlp()
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(x + self.mlp(x))       # layer's return is norm's return


@pytest.mark.parametrize("inner", ["aot_eager", "inductor"])
def test_module_selector_keeps_a_child_whose_output_is_also_its_parents_output(inner):
    """Issue 25 defect 2: `module:**` kept one match per node, named by the parent: records("module:mlp.down")
    was empty although forward hooks see mlp.down return that value."""
    model = Layer().eval()
    want = hooked(model, X)
    cm = torch.compile(model, backend="superstep", options={"inner": inner, "probe": ["module:**"],
                                                            "actions": ["record"]})
    with dynstep.session() as s, torch.no_grad():
        cm(X)
    for name in ("mlp", "mlp.down", "mlp.up", "norm"):
        (snap,) = s.records(f"module:{name}")
        torch.testing.assert_close(snap.tensor, want[name])
    assert len(s.records()) == 3                         # one probe per value: up, down (= mlp), norm
    (down,) = s.records("module:mlp.down")
    assert down.modules == ("mlp", "mlp.down") and down.module == "mlp.down"
    assert s.records("module:mlp") == s.records("module:mlp.down")


def test_one_pause_at_a_value_two_modules_return_named_by_both(events):
    from dynstep.core.events import Stopped

    model = Layer().eval()
    cm = torch.compile(model, backend="superstep", options={"inner": "aot_eager", "pause": ["module:mlp", "module:mlp.down"],
                                                            "commands": "set value = value * 0; c"})
    with torch.no_grad():
        out = cm(X)
        expected = model.norm(X)                   # mlp returned zeros
    stops = [e for e in events if isinstance(e, Stopped)]
    assert len(stops) == 1 and stops[0].site.modules == ("mlp", "mlp.down")
    torch.testing.assert_close(out, expected)


def test_recordings_keep_every_module_path_of_a_value(tmp_path):
    model = Layer().eval()
    cm = torch.compile(model, backend="superstep", options={"inner": "eager", "probe": ["module:mlp.down"],
                                                            "actions": ["record"]})
    with dynstep.session(path=tmp_path / "run.dynstep") as s, torch.no_grad():
        cm(X)
    rec = dynstep.load(tmp_path / "run.dynstep")
    assert [r.modules for r in rec.records("module:mlp")] == [("mlp", "mlp.down")] == \
        [r.modules for r in s.records("module:mlp")]

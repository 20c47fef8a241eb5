"""The bytecode stepper's hooks into Dynamo: its code callbacks, value stacks, cache entries, guards.

Two ways to learn which code objects Dynamo produced, chosen by `dynstep.bytecode.mechanism`:
torch's bytecode-debugger callback (torch 2.12+: `set_dynamo_code_callback`, called before each
such code object runs) and, on every torch dynstep supports, Dynamo's bytecode hook
(`register_dynamo_bytecode_hook`, called as each one is made) plus the ones made before
(`dynamo_output_codes`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch


BYTECODE_HOOKS = ("set_bytecode_debugger_callback", "get_bytecode_debugger_callback",
                  "_get_frame_value_stack_with_depth", "NULL_STACK_VALUE")


def bytecode_hooks_missing() -> str | None:
    """None when torch has its bytecode-debugger hooks (BYTECODE_HOOKS), else which are missing
    (torch 2.11 has none of them; torch 2.12 and 2.13 have all: they came with
    torch/_dynamo/bytecode_debugger.py)."""
    import torch._C._dynamo.eval_frame as eval_frame

    missing = [name for name in BYTECODE_HOOKS if not hasattr(eval_frame, name)]
    if not missing:
        return None
    return (f"torch {torch.__version__} lacks torch._C._dynamo.eval_frame.{', '.join(missing)} "
            "(torch's bytecode debugger hooks, present from torch 2.12)")


def set_dynamo_code_callback(fn: Callable[[Any], None] | None) -> Callable[[Any], None] | None:
    # torch/csrc/dynamo/eval_frame.c (exposed in torch/_C/_dynamo/eval_frame.pyi):
    # set_bytecode_debugger_callback(fn) calls fn(code) before any Dynamo-generated code object
    # runs, including ones compiled before it was set; torch/_dynamo/bytecode_debugger.py uses it.
    # Returns the callback it replaced, so nesting restores it.
    from torch._C._dynamo.eval_frame import get_bytecode_debugger_callback, set_bytecode_debugger_callback

    previous = get_bytecode_debugger_callback()
    set_bytecode_debugger_callback(fn)
    return previous


def bytecode_hook_missing() -> str | None:
    """None when torch has Dynamo's bytecode hook (torch >= 2.1, so every torch dynstep supports)."""
    import torch._dynamo.convert_frame as convert_frame

    if callable(getattr(convert_frame, "register_bytecode_hook", None)):
        return None
    return f"torch {torch.__version__} lacks torch._dynamo.convert_frame.register_bytecode_hook"


def register_dynamo_bytecode_hook(fn: Callable[[Any], None]) -> Any:
    # torch/_dynamo/convert_frame.py: register_bytecode_hook(hook) calls hook(code, new_code) for
    # every code object Dynamo makes (the transformed function, and each resume function when it
    # is compiled), right after making it and before it is cached or run; a hook returning None
    # keeps Dynamo's code. Returns a RemovableHandle (torch/utils/hooks.py): call .remove().
    from torch._dynamo.convert_frame import register_bytecode_hook

    def hook(code: Any, new_code: Any) -> None:
        _originals[new_code] = code      # orig_code_map gets it only after the hooks ran
        fn(new_code)

    return register_bytecode_hook(hook)


_originals: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def dynamo_output_codes() -> list[Any]:
    # torch/_dynamo/convert_frame.py: output_codes, a Tracker whose .seen holds weak references to
    # every code object Dynamo produced since the last torch._dynamo.reset() (it clears them);
    # those compiled before the bytecode hook was registered are found here.
    from torch._dynamo import convert_frame

    refs = getattr(getattr(convert_frame, "output_codes", None), "seen", ())
    return [code for code in (ref() for ref in list(refs)) if code is not None]


def frame_value_stack(frame: Any, depth: int) -> list[Any]:
    # torch/csrc/dynamo/eval_frame.c: _get_frame_value_stack_with_depth(frame, depth) reads the
    # frame's real value stack (bottom first); NULL slots come back as NULL_STACK_VALUE.
    from torch._C._dynamo.eval_frame import NULL_STACK_VALUE, _get_frame_value_stack_with_depth

    return ["<NULL>" if v is NULL_STACK_VALUE else v for v in _get_frame_value_stack_with_depth(frame, depth)]


def original_code(code: Any) -> Any:
    # torch/_dynamo/utils.py: orig_code_map (transformed code -> the user's code), filled by
    # torch/_dynamo/convert_frame.py when it builds the transformed code.
    from torch._dynamo.utils import orig_code_map

    return orig_code_map.get(code) or _originals.get(code)


@dataclasses.dataclass(frozen=True)
class GuardEntry:
    """One compiled entry of a code object in Dynamo's cache, as plain data."""

    code: Any                      # the transformed code object of this entry
    code_parts: tuple[str, ...]    # the guards, as Dynamo prints them
    failed: tuple[str, ...]        # the guards that fail for the given locals (empty: all pass)


def cache_entries(code: Any) -> list[Any]:
    # torch/_dynamo/eval_frame.py: _debug_get_cache_entry_list(code) -> [CacheEntry], newest
    # first; each has .code (the transformed code) and .guard_manager (GuardManagerWrapper,
    # torch/_dynamo/guards.py, with .code_parts and .check_verbose(f_locals)).
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    return list(_debug_get_cache_entry_list(code))


def guard_entries(code: Any, f_locals: dict[str, Any], *, check_except: Any = None) -> list[GuardEntry]:
    """Each cache entry of `code` (newest first) with the guards that fail for `f_locals`; the entry
    whose code is `check_except` (the one running now) is not checked."""
    out = []
    for entry in cache_entries(code):
        manager = entry.guard_manager
        failed: tuple[str, ...] = ()
        if entry.code is not check_except:
            try:
                verbose = manager.check_verbose(f_locals)
                failed = () if verbose.result else tuple(verbose.verbose_code_parts)
            except Exception as exc:   # guards can read values a frame no longer has
                failed = (f"<could not evaluate: {type(exc).__name__}: {exc}>",)
        out.append(GuardEntry(entry.code, tuple(getattr(manager, "code_parts", ()) or ()), failed))
    return out


def recompile_reasons(code: Any) -> list[str]:
    # torch/_dynamo/utils.py: guard_failures[original code] -> the failed-guard reasons Dynamo
    # recorded at each recompile (torch/_dynamo/guards.py: get_guard_fail_reason).
    from torch._dynamo.utils import guard_failures

    return [str(r) for r in guard_failures.get(code, [])]


@contextlib.contextmanager
def compile_callbacks(on_start: Callable[[], None], on_end: Callable[[], None]) -> Iterator[None]:
    """`on_start()` when torch starts compiling, `on_end()` when it is done, while the block is open."""
    # torch/_dynamo/callback.py: callback_handler runs its start callbacks when the outermost compile
    # begins and its end callbacks when it ends (install_callbacks counts nested ones): a frame's Dynamo
    # compile (torch/_dynamo/convert_frame.py, with its backend's AOTAutograd and Inductor work),
    # AOTAutograd's lazy backward compile (torch/_functorch/_aot_autograd/runtime_wrappers.py) and
    # CUDA-graph recording (torch/_inductor/cudagraph_trees.py).
    from torch._dynamo.callback import callback_handler

    def start(args: Any) -> None:
        on_start()

    def end(args: Any) -> None:
        on_end()

    callback_handler.register_start_callback(start)
    callback_handler.register_end_callback(end)
    try:
        yield
    finally:
        callback_handler.remove_start_callback(start)
        callback_handler.remove_end_callback(end)


def compile_id_of(code: Any) -> str:
    """The compile id ("0/1") of a code object Dynamo produced, while it is in Dynamo's cache ("" otherwise)."""
    # torch/_dynamo/eval_frame.py: _debug_get_cache_entry_list(original code) -> CacheEntry objects, each
    # with .code (the transformed code) and .compile_id (torch/csrc/dynamo/cache_entry.h)
    original = original_code(code)
    if original is None:
        return ""
    return next((str(e.compile_id) for e in cache_entries(original) if e.code is code), "")

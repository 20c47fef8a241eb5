"""Loading a built extension module from its file, without a package or sys.path entry (standard
library only): the native probe kernel (`dynstep.ops.native`) loads its library so. The bytecode
stepper's value-stack reader (`dynstep.bytecode.framestack`) keeps its own few lines: a test loads
that file alone, outside the package, under other Python versions.

    module = load_extension("dynstep_native", Path(".../dynstep_native.so"))
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path
from types import ModuleType


def load_extension(name: str, library: Path) -> ModuleType:
    """Import the extension module `name` from `library` (ImportError when it cannot be loaded)."""
    loader = importlib.machinery.ExtensionFileLoader(name, str(library))
    spec = importlib.util.spec_from_file_location(name, str(library), loader=loader)
    if spec is None:
        raise ImportError(f"no module spec for {library}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module

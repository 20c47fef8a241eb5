"""Packaging only: every other piece of metadata is in pyproject.toml.

Packages are discovered rather than listed (a hand list once missed `dynstep.dist` and an installed
wheel could not start): everything under dynstep/, and backends/ installed as `dynstep.backends`.
The native sources in csrc/ are shipped inside the package as `dynstep/_csrc/` so an installed
wheel builds its native kernels on first use, as a checkout does (dynstep/ops/native.py).
"""

from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
CSRC_SUFFIXES = {".c", ".cpp", ".cu", ".h", ".md", ".sh"}


def packages() -> list[str]:
    found = find_packages(include=["dynstep", "dynstep.*"])
    found += ["dynstep.backends"] + [f"dynstep.backends.{p}" for p in find_packages("backends")]
    return sorted(found)


class BuildWithSources(build_py):
    """Copies csrc/ into the built package as dynstep/_csrc (kept out of the source tree)."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "dynstep" / "_csrc"
        for path in sorted((ROOT / "csrc").rglob("*")):
            if path.is_file() and path.suffix in CSRC_SUFFIXES:
                dest = target / path.relative_to(ROOT / "csrc")
                dest.parent.mkdir(parents=True, exist_ok=True)
                self.copy_file(str(path), str(dest))


setup(packages=packages(), package_dir={"dynstep.backends": "backends"},
      cmdclass={"build_py": BuildWithSources})

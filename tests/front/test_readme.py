"""The README's two set-up commands stay true: CI runs the README's test command verbatim."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    blocks = text.split("```bash\n")[1:3]
    return [b.split("\n```")[0].strip() for b in blocks]


def test_readme_opens_with_install_demo_and_test_commands():
    demo, tests = readme_commands()
    assert "pip install -q torch==2.13.0" in demo and demo.endswith("dynstep demo")
    assert "pytest" in tests


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert readme_commands()[1] in ci.splitlines()

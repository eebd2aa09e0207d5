"""Help that fits and a README that is a front door.

Every ``--help`` (every command and subcommand) within 80 lines at 80 columns; ``serve
--help`` names no option it does not have; the README at most 120 lines, with every command
in its table and the test command ``.ci/run`` reads; ``mcp --help`` names every MCP tool.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import click
import pytest

from instinct_serve.cli.help import first_sentence
from instinct_serve.cli.main import COMMANDS, _build_group, main

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_LINES = 80


def _paths() -> list[list[str]]:
    group = _build_group()
    ctx = click.Context(group, info_name="instinct")
    found: list[list[str]] = [[]]
    for name in COMMANDS:
        command = group.get_command(ctx, name)
        found.append([name])
        if isinstance(command, click.Group):
            sub = click.Context(command, info_name=name, parent=ctx)
            found += [[name, s] for s in command.list_commands(sub)]
    return found


def help_of(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    with pytest.raises(SystemExit) as info:
        main([*args, "--help"])
    assert info.value.code in (0, None)
    return capsys.readouterr().out


@pytest.mark.parametrize("path", _paths(), ids=lambda p: " ".join(p) or "instinct")
def test_every_help_fits_80_lines_of_80_columns(
    path: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    text = help_of(capsys, *path)
    assert text.startswith("Usage: instinct")
    assert len(text.splitlines()) <= MAX_LINES, f"{len(text.splitlines())} lines:\n{text}"
    wide = [line for line in text.splitlines() if len(line) > 80]
    assert not wide, "\n".join(wide)


def test_the_grouped_help_and_help_all(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    text = help_of(capsys, "serve")
    for section in ("What to serve:", "Where:", "How:", "Advanced", "Examples:"):
        assert section in text, text
    assert "--format" not in text  # serve has none
    assert "--env-literal" in text  # an advanced option, by name, never cut at its hyphen
    with pytest.raises(SystemExit):
        main(["serve", "--help-all"])
    every = capsys.readouterr().out
    assert "--stall-timeout" in every and "JSON Lines" in every and "--format" not in every
    assert "What to fetch:" in help_of(capsys, "pull")


def test_an_options_first_sentence() -> None:
    assert first_sentence("Use only these GPUs (device indices; sets X).") == (
        "Use only these GPUs (device indices; sets X)."
    )
    assert first_sentence("Context, e.g. 32k. More here.  [default: 5]") == "Context, e.g. 32k."
    assert first_sentence("Port of the endpoint  [default: 8000]") == "Port of the endpoint."


def test_the_readme_is_a_front_door_with_every_command() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 120
    rows = re.findall(r"^\| `([a-z]+)` \|", text, re.M)
    assert sorted(rows) == sorted(COMMANDS), set(COMMANDS) ^ set(rows)
    assert "recipes search" in text and "docs/reference.md" in text


def test_ci_reads_the_test_command_from_the_readme() -> None:
    """``.ci/run``'s own awk, on the README: the command between the test-command markers."""
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    awk = re.search(r"test_cmd=\$\(awk '([^']+)' README.md\)", script)
    assert awk is not None, "the way .ci/run reads the README changed: update this test"
    found = subprocess.run(
        ["awk", awk.group(1), str(README)], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert found == (
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test,mcp]' && "
        ".venv/bin/pytest -q -n 3 --dist worksteal"
    )
    assert (
        "python3 -m venv .venv && .venv/bin/pip install -q . && .venv/bin/instinct plan"
        in text_of()
    )


def text_of() -> str:
    return README.read_text(encoding="utf-8")


def test_mcp_help_names_every_tool(capsys: pytest.CaptureFixture[str]) -> None:
    from instinct_serve.agents.server import TOOLS

    text = " ".join(help_of(capsys, "mcp").split())
    missing = [name for name in TOOLS if not re.search(rf"\b{name}\b", text)]
    assert not missing, missing

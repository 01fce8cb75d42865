"""Every install command of README.md and docs/ runs as pasted into a shell: no ``<placeholder>``
(``<this`` is a redirection), no name no package index serves (``pip install django-gcra``:
the project is installed from a clone or a wheel). Shell blocks and inline code alike."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SHELL = ("sh", "bash", "shell", "console", "")
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w+-]*)[^\n]*$")
INSTALL = re.compile(r"^\s*(?:\$\s*)?(?:python\S* -m )?(?:pip\S* (?:install|wheel|download)\b|git clone\b)")
PLACEHOLDER = re.compile(r"<[A-Za-z][^<>]*>")
OUR_NAME = re.compile(r"^django[-_.]gcra(\[[^\]]*\])?$", re.I)  # a requirement by name, not a path


def commands(text: str) -> list[tuple[int, str]]:
    """(line number, command) of every install command: shell block lines and inline code."""
    found, lines, fence = [], text.splitlines(), None
    for number, line in enumerate(lines, 1):
        opened = FENCE.match(line)
        if opened and fence is None:
            fence = opened["lang"]
            continue
        if fence is not None and re.match(r"^\s*```\s*$", line):
            fence = None
            continue
        if fence is not None:
            if fence in SHELL and INSTALL.match(line):
                found.append((number, line.strip()))
            continue
        found += [(number, span) for span in re.findall(r"`([^`]+)`", line) if INSTALL.match(span)]
    return found


def problems(command: str) -> list[str]:
    """What stops ``command`` from running as pasted."""
    lexer = shlex.shlex(command.removeprefix("$ "), posix=True, punctuation_chars=True)
    lexer.commenters = "#"
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError as exc:
        return [f"does not parse as a shell command: {exc}"]
    found = [f"placeholder {p!r}" for w in words for p in PLACEHOLDER.findall(w)]
    found += [f"redirection {w!r}" for w in words if set(w) & set("<>") and not re.search(r"[<>]=|[\w.\]]+[<>]", w)]
    if any(re.match(r"^pip\S*$", w) for w in words[:3]):  # (git clone's directory is no requirement)
        found += [f"{w!r} is on no package index: install ./django_gcra or the wheel" for w in words
                  if OUR_NAME.match(w)]
    return found


def test_the_install_commands_are_found():
    found = {page.relative_to(ROOT).as_posix(): commands(page.read_text()) for page in PAGES}
    assert any("git clone" in c for _, c in found["README.md"])
    assert any("git clone" in c for _, c in found["docs/installation.md"])
    assert any("pip install" in c for _, c in found["docs/howto/clients.md"])
    assert any("pip install" in c for _, c in found["docs/alerts.md"])


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_install_command_runs_as_pasted(page):
    bad = [f"{page.name}:{number}: {command}: {', '.join(found)}"
           for number, command in commands(page.read_text()) if (found := problems(command))]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("command", [
    "git clone <this repository> django_gcra",
    'pip install "dist/django_gcra-<version>-py3-none-any.whl[drf]"',
    'pip install "django-gcra[client]"',
    "pip install django-gcra[prometheus]",
    "pip install django_gcra",
])
def test_a_command_that_cannot_run_as_pasted_is_found(command):
    assert problems(command)
    assert commands(f"Install: `{command}`.\n\n```sh\n{command}\n```\n") == [(1, command), (4, command)]


@pytest.mark.parametrize("command", [
    "git clone https://example.invalid/django_gcra.git django_gcra",
    'pip install "./django_gcra[drf]"    # + the DRF throttle classes <drf>',
    'pip install "$(ls dist/django_gcra-*.whl)[drf]"',
    'pip install "redis>=5" hiredis',
    "pip install -e ./django_gcra",
])
def test_a_command_that_runs_as_pasted_passes(command):
    assert problems(command) == []

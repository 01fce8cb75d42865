"""Every Python block of README.md and docs/ runs as written, in a fresh Django project
(tests/support/snippets.py; blocks marked ``<!-- snippet: fragment -->`` are not run)."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.snippets import python_blocks

ROOT = Path(__file__).resolve().parent.parent
PAGES = [p.relative_to(ROOT) for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
         if python_blocks(p.read_text())]


def run_page(page):
    return subprocess.run([sys.executable, "-m", "tests.support.snippets", str(page)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_the_pages_with_python_blocks_are_found():
    assert {"README.md", "docs/quickstart.md", "docs/installation.md"} <= {str(p) for p in PAGES}


@pytest.mark.parametrize("page", PAGES, ids=str)
def test_every_python_block_runs(page):
    result = run_page(page)
    assert result.returncode == 0, result.stderr


def test_a_broken_snippet_fails_and_a_marked_fragment_is_skipped(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- snippet: fragment -->\n```python\nthis is not python\n```\n\n"
        "<!-- snippet: file myapp/limits.py -->\n```python\ndef tenant_of(request):\n    return 'acme'\n```\n\n"
        '```python\nDJANGO_GCRA = {"DESCRIPTORS": {"tenant": "myapp.limits.tenant_of"}, "POLICIES": {\n'
        '    "api": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "2/m"}]}}}\n```\n\n'
        '```python\nfrom django_gcra import decide\n\nassert decide("api", {"tenant": "acme"}).allowed\n```\n')
    assert run_page(page).returncode == 0, run_page(page).stderr
    # An undefined policy, a descriptor path that does not import, a missing import:
    for bad, error in [('```python\nfrom django_gcra import decide\ndecide("nope", {})\n```\n', "nope"),
                       ('```python\nDJANGO_GCRA = {"DESCRIPTORS": {"t": "myapp.nowhere.t"}}\n```\n', "django_gcra.E"),
                       ('```python\ndecide("api", {})\n```\n', "NameError"),
                       ('```python\nINSTALLED_APPS = [..., "not_an_app"]\n```\n', "not_an_app")]:
        page.write_text(bad)
        result = run_page(page)
        assert result.returncode == 1 and error in result.stderr, (bad, result.stderr)

"""The rendered docs at a 1280 px window, in headless chromium: ``mkdocs build``, then
scripts/check_docs_site.py on every page (no code block or table cut; every figure the
column's width with text of 11 px or more)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def test_every_page_fits_a_1280px_window(tmp_path):
    if not os.path.exists("/usr/bin/chromium"):
        pytest.fail("/usr/bin/chromium is missing (scripts/install-system-deps.sh)")
    mkdocs = Path(sys.executable).parent / "mkdocs"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run([str(mkdocs), "build", "--strict", "-q", "-d", str(tmp_path / "site")], cwd=ROOT,
                           capture_output=True, text=True, timeout=300, env=env)
    assert built.returncode == 0, built.stderr[-3000:]
    checked = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_docs_site.py"), str(tmp_path / "site")],
                             cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stdout[-4000:] + checked.stderr[-2000:]
    assert "smallest text" in checked.stdout  # the figures were found and measured

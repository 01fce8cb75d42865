"""Every Python snippet of docs/howto/clients.md runs as written, against the served site
(the snippets' URL replaced by the site's 1/s view)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.http_servers import start_site

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "howto" / "clients.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
DOC_URL = "http://127.0.0.1:8000/api/items/"

pytestmark = [pytest.mark.redis, pytest.mark.slow]


@pytest.fixture(scope="module")
def site(redis_server):
    site = start_site(redis_server.url)
    yield site
    site.stop()


def test_the_page_has_its_snippets():
    assert len(SNIPPETS) >= 5 and sum(DOC_URL in s for s in SNIPPETS) >= 3


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_snippet_runs(site, index):
    code = SNIPPETS[index].replace(DOC_URL, site.url + "/tight/")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    if DOC_URL in SNIPPETS[index]:
        assert "200" in done.stdout

"""The README's demo command keeps working: the testproject shows allowed, then limited."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_demo_command_shows_allowed_then_limited():
    result = subprocess.run([sys.executable, "testproject/manage.py", "demo"], cwd=ROOT, capture_output=True,
                            text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    statuses = [line.split(":")[1].split()[0] for line in result.stdout.splitlines() if line.strip().startswith("#")]
    assert "200" in statuses and "429" in statuses
    assert statuses.index("200") < statuses.index("429")

"""Fetch a peer's source distribution at test time (never copied into the repository).

Without network access to the package index, name a local copy of the sdist in the
variable the caller passes as ``local_env`` (``DJANGO_GCRA_DRL_SDIST`` for
django-ratelimit), or set ``DJANGO_GCRA_SKIP_PEER_SUITES=1`` to skip the peer suites;
without either an impossible download fails the test loudly.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

SKIP_ENV = "DJANGO_GCRA_SKIP_PEER_SUITES"


def download_sdist(requirement: str, dest: Path, local_env: str, timeout: float = 180.0) -> Path:
    """``pip download --no-deps --no-binary :all: <requirement>`` into ``dest``; the archive
    (or the file named by the ``local_env`` variable, when set)."""
    local = os.environ.get(local_env)
    if local:
        if not Path(local).is_file():
            pytest.fail(f"{local_env}={local!r} is not a file")
        return Path(local)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
           "--disable-pip-version-check", requirement, "-d", str(dest)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        problem = None if done.returncode == 0 else f"exit {done.returncode}:\n{done.stdout}\n{done.stderr}"
    except subprocess.TimeoutExpired:
        problem = f"no answer within {timeout:.0f} s"
    archives = sorted(dest.glob("*.tar.gz"))
    if problem is None and not archives:
        problem = "pip saved no .tar.gz"
    if problem is not None:
        message = f"could not download the sdist of {requirement} ({' '.join(cmd)}): {problem}"
        if os.environ.get(SKIP_ENV) == "1":
            pytest.skip(f"{SKIP_ENV}=1 and {message}")
        pytest.fail(f"{message}\nSet {local_env} to a local copy of the sdist, or {SKIP_ENV}=1 to skip.")
    return archives[0]


def read_member(archive: Path, path_in_package: str) -> str:
    """The text of ``<top dir>/<path_in_package>`` inside an sdist."""
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.split("/", 1)[-1] == path_in_package:
                return tar.extractfile(member).read().decode("utf-8")
    raise AssertionError(f"{archive.name} has no {path_in_package}")


def rename_package(text: str, old: str, new: str) -> tuple[str, int]:
    """Every whole-word ``old`` (imports and the dotted paths naming the test module) -> ``new``."""
    return re.subn(rf"\b{re.escape(old)}\b", new, text)

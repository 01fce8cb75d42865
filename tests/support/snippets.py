"""Run every Python code block of a Markdown page, as a reader would, in a fresh Django project.

    python -m tests.support.snippets README.md docs/quickstart.md

Each page runs in its own process: Django configured from scratch (the contrib apps,
``django_gcra``, ``rest_framework`` when installed, an in-memory database, migrated) on an
embedded fakeredis served over loopback TCP, so sync and async clients both reach it.

Blocks run in page order, each in a fresh namespace: every snippet carries its own imports.
A block that binds a setting is checked and, where it can be, applied for the blocks after it:

- ``DJANGO_GCRA``, ``REST_FRAMEWORK``: applied (``override_settings``), then Django's system
  checks run and any error fails the page;
- ``INSTALLED_APPS``, ``MIDDLEWARE``: every dotted path listed must import (``...`` stands
  for the project's own entries);
- ``CACHES``: every ``BACKEND`` and ``CLIENT_CLASS`` must import (the addresses are not dialled).

Markers, an HTML comment on the line before the fence (invisible in the rendered docs):

- ``<!-- snippet: fragment -->``: not run (a partial listing, or needs servers the page describes);
- ``<!-- snippet: file myapp/limits.py -->``: not run but written to that path on ``sys.path``
  before the page's other blocks run (so settings can name ``myapp.limits.tenant_of``).

Exit status 1 and ``PAGE:LINE: error`` on stderr for the first block that fails.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import re
import sys
import tempfile
import textwrap
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w+-]*)[^\n]*$")
MARKER = re.compile(r"^\s*<!--\s*snippet:\s*(?P<kind>fragment|file)\s*(?P<arg>\S*)\s*-->\s*$")
APPLIED = ("DJANGO_GCRA", "REST_FRAMEWORK")


@dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the opening fence
    code: str
    kind: str  # run | fragment | file
    path: str = ""


def python_blocks(text: str) -> list[Block]:
    """The ``python`` fenced blocks of a page, with the marker that precedes each."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        indent, lang, start = opened["indent"], opened["lang"], i
        i += 1
        body: list[str] = []
        while i < len(lines) and not re.match(rf"^{indent}```\s*$", lines[i]):
            body.append(lines[i])
            i += 1
        i += 1
        if lang not in ("python", "py"):
            continue
        before = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.match(before)
        kind, arg = (marker["kind"], marker["arg"]) if marker else ("run", "")
        blocks.append(Block(start + 1, textwrap.dedent("\n".join(body)) + "\n", kind, arg))
    return blocks


def _start_store() -> str:
    from fakeredis import TcpFakeServer

    server = TcpFakeServer(("127.0.0.1", 0), server_type="redis")
    server.daemon_threads, server.block_on_close = True, False  # exit with clients still connected
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    return f"redis://127.0.0.1:{server.server_address[1]}/0"


def configure() -> None:
    """A fresh project: what the installation page asks for, and nothing of the test suite."""
    import django
    from django.conf import settings

    apps = ["django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
            "django.contrib.sessions", "django.contrib.messages"]
    try:
        importlib.import_module("rest_framework")
        apps.append("rest_framework")
    except ImportError:
        pass
    settings.configure(
        SECRET_KEY="snippets", USE_TZ=True, ALLOWED_HOSTS=["*"], ROOT_URLCONF=__name__,
        INSTALLED_APPS=[*apps, "django_gcra"],
        MIDDLEWARE=["django.contrib.sessions.middleware.SessionMiddleware",
                    "django.contrib.auth.middleware.AuthenticationMiddleware",
                    "django.contrib.messages.middleware.MessageMiddleware"],
        TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True,
                    "OPTIONS": {"context_processors": ["django.template.context_processors.request",
                                                       "django.contrib.auth.context_processors.auth",
                                                       "django.contrib.messages.context_processors.messages"]}}],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3",  # a file: the override loader's thread
                               "NAME": str(Path(tempfile.mkdtemp(prefix="gcra-snippets-db-")) / "db.sqlite3")}},
        CACHES={"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": _start_store()}},
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        DJANGO_GCRA={"TIMEOUT": 1000},  # ms: fakeredis runs Lua in Python
    )
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


urlpatterns: list[object] = []


class SnippetError(Exception):
    pass


def _imports(paths: object, setting: str) -> None:
    from django.utils.module_loading import import_string

    for entry in paths if isinstance(paths, (list, tuple)) else []:
        if entry is Ellipsis:
            continue
        try:
            if setting == "INSTALLED_APPS":
                try:
                    importlib.import_module(entry)
                except ImportError:
                    import_string(entry)  # an AppConfig path
            else:
                import_string(entry)
        except ImportError as exc:
            raise SnippetError(f"{setting} lists {entry!r}, which does not import: {exc}") from None


def check_settings(namespace: dict[str, object]) -> None:
    """Check, and apply for later blocks, the settings a block binds."""
    from django.core import checks
    from django.test import override_settings
    from django.utils.module_loading import import_string

    for name in ("INSTALLED_APPS", "MIDDLEWARE"):
        if name in namespace:
            _imports(namespace[name], name)
    caches = namespace.get("CACHES")
    if isinstance(caches, dict):
        for alias, config in caches.items():
            for path in (config.get("BACKEND"), (config.get("OPTIONS") or {}).get("CLIENT_CLASS")):
                if path:
                    try:
                        import_string(path)
                    except ImportError as exc:
                        raise SnippetError(f"CACHES[{alias!r}] names {path!r}, which does not import: {exc}") from None
    applied = {name: namespace[name] for name in APPLIED if name in namespace}
    if not applied:
        return
    if "DJANGO_GCRA" in applied and isinstance(applied["DJANGO_GCRA"], dict):
        applied["DJANGO_GCRA"] = {"TIMEOUT": 1000, **applied["DJANGO_GCRA"]}  # fakeredis is slow, not the docs
    override_settings(**applied).enable()  # stays in force for the page's later blocks
    errors = [m for m in checks.run_checks() if m.level >= checks.ERROR]
    if errors:
        raise SnippetError("system check errors:\n" + "\n".join(f"  {m.id}: {m.msg}" for m in errors))


def run_block(block: Block) -> None:
    code = compile(block.code, f"<snippet line {block.line}>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    namespace: dict[str, object] = {"__name__": "snippet"}
    result = eval(code, namespace)  # a coroutine when the block awaits at top level
    if inspect.iscoroutine(result):
        asyncio.run(result)
    check_settings(namespace)


def run_page(page: Path) -> list[str]:
    """Run the page's blocks; return the failures (at most one: later blocks may depend on it)."""
    blocks = python_blocks(page.read_text())
    root = Path(tempfile.mkdtemp(prefix="gcra-snippets-"))
    sys.path.insert(0, str(root))
    for block in blocks:
        if block.kind == "file":
            target = root / block.path
            target.parent.mkdir(parents=True, exist_ok=True)
            for parent in target.relative_to(root).parents:
                (root / parent / "__init__.py").touch()
            target.write_text(block.code)
    for block in blocks:
        if block.kind != "run":
            continue
        try:
            run_block(block)
        except SnippetError as exc:
            return [f"{page}:{block.line}: {exc}"]
        except BaseException:
            return [f"{page}:{block.line}: the block raised:\n{traceback.format_exc(limit=-3)}\n{block.code}"]
    return []


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.support.snippets PAGE.md (one page per process)", file=sys.stderr)
        return 2
    configure()
    failures = run_page(Path(argv[0]))
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

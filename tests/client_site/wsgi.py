"""``gunicorn tests.client_site.wsgi:application`` (tests/support/http_servers.py starts it)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.client_site.settings")

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()

from django.db import connection  # noqa: E402

from django_gcra.models import LimitOverride  # noqa: E402

# This connection stays open for the worker's life, which keeps the shared in-memory
# database (and its empty overrides table) alive for the request threads.
with connection.schema_editor() as editor:
    editor.create_model(LimitOverride)

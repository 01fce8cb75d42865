"""The WSGI application gunicorn serves in tests/test_slots_load.py."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.slots_settings")

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()

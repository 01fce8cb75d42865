"""The WSGI application gunicorn serves in the load-shedding test and benchmark."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.shed_settings")

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()

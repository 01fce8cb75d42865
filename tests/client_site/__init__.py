"""A small Django site served by a real HTTP server (gunicorn) for the client-helper
tests and the retry-storm benchmark: django_gcra-limited views on a real redis-server."""

"""Separate processes for the hot-reload tests: they share a database (file SQLite, or
PostgreSQL with DATABASE_URL) and a real redis-server with the test, as the processes of
one deployment do.

    python -m tests.support.plane_procs CONFIG_JSON COMMAND [ARG]

CONFIG_JSON holds ``db`` (a Django DATABASES entry: tests/support/databases.py), ``redis`` (URL) and ``gcra`` (DJANGO_GCRA).
Commands: ``migrate``; ``watch`` (print the burst in force for tenant acme whenever it
changes, as ``burst <n|off> <unix time>``); ``watch-access`` (the same with the outcome of
tenant acme's decisions, ``outcome <allowed|blocked|exempt> <unix time>``); ``orm-save
FIELDS_JSON`` / ``admin-add FORM_JSON`` / ``orm-delete`` / ``rule-save FIELDS_JSON`` (an
``AccessRule``, replacing every other; ``expires_in``: seconds from now, printed as ``expires <unix time>``) (write, then print ``committed <unix time>``).
"""

from __future__ import annotations

import json
import sys
import time


def setup(config: dict) -> None:
    import django
    from django.conf import settings

    settings.configure(
        SECRET_KEY="plane-procs",
        ALLOWED_HOSTS=["*"],
        USE_TZ=True,
        ROOT_URLCONF="tests.plane_urls",
        INSTALLED_APPS=["django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
                        "django.contrib.sessions", "django.contrib.messages", "django_gcra"],
        MIDDLEWARE=["django.contrib.sessions.middleware.SessionMiddleware",
                    "django.contrib.auth.middleware.AuthenticationMiddleware",
                    "django.contrib.messages.middleware.MessageMiddleware"],
        TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True,
                    "OPTIONS": {"context_processors": ["django.template.context_processors.request",
                                                       "django.contrib.auth.context_processors.auth",
                                                       "django.contrib.messages.context_processors.messages"]}}],
        DATABASES={"default": config["db"]},
        CACHES={"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": config["redis"]}},
        DJANGO_GCRA=config["gcra"],
    )
    django.setup()


def watch(deadline: float) -> None:
    from django_gcra import decide

    last = object()
    print("ready", flush=True)
    while time.time() < deadline:
        decision = decide("browser", {"tenant": "acme"}, cost=0)
        burst = decision.limits[0].burst if decision.limits else "off"
        if burst != last:
            print(f"burst {burst} {time.time()!r}", flush=True)  # (exact: an expiry is compared to it)
            last = burst
        time.sleep(0.01)


def watch_access(deadline: float) -> None:
    from django_gcra import decide
    from django_gcra.decision import outcome_of

    last = None
    print("ready", flush=True)
    while time.time() < deadline:
        outcome = outcome_of(decide("browser", {"tenant": "acme"}, cost=0))
        if outcome != last:
            print(f"outcome {outcome} {time.time():.3f}", flush=True)
            last = outcome
        time.sleep(0.01)


def admin_add(form: dict) -> None:
    from django.contrib.auth.models import User
    from django.test import Client

    user = User.objects.filter(username="admin").first() or User.objects.create_superuser("admin", "a@b.c", "pw")
    client = Client()
    client.force_login(user)
    response = client.post("/admin/django_gcra/limitoverride/add/", form)
    if response.status_code != 302:
        raise SystemExit(f"admin add form refused: {response.status_code} {response.content[:2000]!r}")


def main(argv: list[str]) -> None:
    config, command = json.loads(argv[0]), argv[1]
    setup(config)
    from django.core.management import call_command

    from django_gcra.models import LimitOverride

    if command == "migrate":
        call_command("migrate", verbosity=0)
    elif command == "watch":
        watch(time.time() + float(argv[2]))
    elif command == "orm-save":
        LimitOverride.objects.create(**json.loads(argv[2]))
    elif command == "admin-add":
        admin_add(json.loads(argv[2]))
    elif command == "orm-delete":
        LimitOverride.objects.all().delete()
    elif command == "watch-access":
        watch_access(time.time() + float(argv[2]))
    elif command == "rule-save":
        from django_gcra.models import AccessRule

        fields = json.loads(argv[2])
        if "expires_in" in fields:  # seconds from now (this process's now: no startup time in it)
            import datetime

            expires = time.time() + fields.pop("expires_in")
            fields["expires_at"] = datetime.datetime.fromtimestamp(expires, datetime.timezone.utc)
            print(f"expires {expires:.3f}", flush=True)
        AccessRule.objects.all().delete()
        AccessRule.objects.create(**fields)
    else:
        raise SystemExit(f"unknown command {command!r}")
    if not command.startswith("watch"):
        print(f"committed {time.time():.3f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

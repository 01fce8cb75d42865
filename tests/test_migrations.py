"""Every model change ships with its migration, and the migrations apply cleanly."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_no_model_change_lacks_a_migration():
    out = io.StringIO()
    try:
        call_command("makemigrations", "django_gcra", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit as exit:  # --check exits non-zero when a migration is missing
        pytest.fail(f"django_gcra models changed without a migration (exit {exit.code}):\n{out.getvalue()}")


def test_migrations_are_named_and_ship_in_the_package():
    import django_gcra

    folder = Path(django_gcra.__file__).parent / "migrations"
    names = sorted(p.name for p in folder.glob("0*.py"))
    assert (folder / "__init__.py").exists() and names
    assert not any("auto_" in name for name in names), names


@pytest.mark.django_db(transaction=True)
def test_migrating_to_zero_and_back():
    call_command("migrate", "django_gcra", "zero", verbosity=0)
    call_command("migrate", "django_gcra", verbosity=0)
    from django_gcra.models import AuditEvent, LimitOverride

    assert LimitOverride.objects.count() == 0 and AuditEvent.objects.count() == 0


@pytest.mark.django_db
def test_the_check_catches_a_change_without_a_migration(monkeypatch):
    from django_gcra.models import LimitOverride

    monkeypatch.setattr(LimitOverride._meta.get_field("limit"), "max_length", 65)
    with pytest.raises(SystemExit):
        call_command("makemigrations", "django_gcra", "--check", "--dry-run", stdout=io.StringIO())

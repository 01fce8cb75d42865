import django.core.validators
from django.db import migrations, models

from django_gcra.models import CONSTRAINT_ARG


class Migration(migrations.Migration):

    dependencies = [
        ("django_gcra", "0001_policy_plane"),
    ]

    operations = [
        migrations.AlterField(
            model_name="limitoverride",
            name="burst",
            field=models.PositiveIntegerField(blank=True, help_text="Blank keeps the configured burst (or the rate's count).", null=True, validators=[django.core.validators.MinValueValidator(1)], verbose_name="burst"),
        ),
        migrations.AddConstraint(
            model_name="limitoverride",
            constraint=models.CheckConstraint(**{CONSTRAINT_ARG: models.Q(("burst__isnull", True), ("burst__gte", 1), _connector="OR")}, name="gcra_override_burst_positive"),
        ),
    ]

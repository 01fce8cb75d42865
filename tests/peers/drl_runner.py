"""Run django-ratelimit's own tests (a rewritten copy outside the repository) with
Django's test runner and write every test's outcome as JSON.

    python -m tests.peers.drl_runner <dir holding tests.py> <out.json>

The copy's dotted paths (``django_gcra.compat.django_ratelimit.tests.mykey``) name it as a
submodule of the compat package, so that package's ``__path__`` is extended with its
directory for this process only.
"""

from __future__ import annotations

import json
import os
import sys
import unittest


class Recording(unittest.TextTestResult):
    outcomes: dict[str, str] = {}

    def _put(self, test, outcome, err=None):
        Recording.outcomes[test.id()] = outcome if err is None else f"{outcome}: {self._exc_info_to_string(err, test)}"

    def addSuccess(self, test):
        super().addSuccess(test)
        self._put(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._put(test, "failed", err)

    def addError(self, test, err):
        super().addError(test, err)
        self._put(test, "error", err)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        Recording.outcomes[test.id()] = f"skipped: {reason}"


def main(overlay: str, out: str) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.peers.drl_settings")
    import django

    django.setup()
    from django.test.runner import DiscoverRunner

    import django_gcra.compat.django_ratelimit as package

    package.__path__.append(overlay)

    class Runner(DiscoverRunner):
        def get_resultclass(self):
            return Recording

    failures = Runner(verbosity=1, interactive=False).run_tests(["django_gcra.compat.django_ratelimit.tests"])
    with open(out, "w") as fh:
        json.dump(Recording.outcomes, fh, indent=1, sort_keys=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))

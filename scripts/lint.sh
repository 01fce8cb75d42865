#!/usr/bin/env bash
# Static checks: ruff (the package and tests), mypy strict on the package. The layering
# contracts run with the test suite (tests/test_layering.py).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
.venv/bin/ruff check django_gcra tests benchmarks
.venv/bin/mypy

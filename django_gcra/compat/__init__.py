"""Drop-in layers for code written against other rate-limiting apps.

``django_gcra.compat.django_ratelimit`` mirrors django-ratelimit 4.1's import layout: replace
the package name ``django_ratelimit`` in your imports and the decisions are GCRA decisions in
one Redis script call.
"""

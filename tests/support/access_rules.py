"""Callable exempt and deny rules named in the access tests' DJANGO_GCRA['EXEMPT'] / ['DENY']."""


def is_probe(request):
    return request.headers.get("X-Probe") == "yes"


async def is_banned(request):
    return request.headers.get("X-Banned") == "yes"


NOT_CALLABLE = 42

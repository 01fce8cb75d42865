"""Custom descriptor callables named in the tests' DJANGO_GCRA['DESCRIPTORS']."""


def tenant_of(request):
    return request.headers.get("X-Tenant")


def tier_of(request):
    return request.headers.get("X-Tier")


async def async_tenant_of(request):
    return request.headers.get("X-Tenant")

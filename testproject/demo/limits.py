"""Descriptor callables for the demo: the tenant and tier come from request headers.

A real project derives them from the authenticated user or API key, never from a
header the client controls."""


def tenant_of(request):
    return request.headers.get("X-Tenant", "demo-tenant")


def tier_of(request):
    return request.headers.get("X-Tier")

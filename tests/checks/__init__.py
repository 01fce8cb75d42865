"""The system checks: every ID fires for its misconfiguration (lease checks: test_leases)."""

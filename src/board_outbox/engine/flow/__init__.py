"""Flow: which rows may run, where, when and how many at once.

Tenant ownership among the replicas (``membership``), the pauses a row passes (``pause``), the
per-bot and per-tenant concurrency and rate limits (``limits``) whose slots ride on the lease
heartbeat (``leases``), and backpressure when the store slows (``pressure``).

A bottom room: it imports no sibling room of ``engine``.
"""

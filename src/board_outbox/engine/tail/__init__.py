"""The tail: board events -> effect rows -> cursor.

Reading events after a cursor (``reading``), the events the change stream already delivered
(``prefetch``), the subscriptions cached while the stream vouches for them (``subcache``), the
per-tenant tail itself (``tail``: the batches), which tenants it drains and where each one's
cursor starts (``tenants``) and its leaf types (``drain``).

May import ``telemetry`` and ``flow``; never ``handlers``, ``work`` or ``upkeep``.
"""

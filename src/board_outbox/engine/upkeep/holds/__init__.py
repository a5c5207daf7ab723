"""What holds one effect row now, by name (what ``explain`` lists): an ordered list of checks.

Each check looks at the row (and, when it must, at the store: the limits' holders, the live
replicas, the tenant's due rows) and returns the holds it finds; ``explain`` runs every check in
``CHECKS`` order and lists what they return. A new reason to wait is one more check in that
list.

Every store read here is bounded and indexed: one read of the key's slots (at most the limit),
one counter by id, the membership leases (one small document per replica), the pause documents
(one small read, as every replica reads them each heartbeat), one count stopped at
``TURN_LIMIT`` over the pending rows of one tenant.

The checks by what they read: the row's own state (``state``: done, dead-lettered, leased,
backing off), the pauses (``pauses``), the launch limits (``limits``), coalescing
(``coalescing``), who claims it and its turn (``claiming``); what every check reads and
leaves (``case``), and their order (``checks``).
"""

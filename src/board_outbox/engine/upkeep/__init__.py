"""Upkeep: the operator's tools over what is stored.

The completeness audit (``audit``), replaying a range under today's rules (``replay``), bulk
replay of dead-letters (``bulk_replay``), why one row waits (``explain``, with its checks in
``holds``), the console's rolling series (``series``) and read-model generations for shadow
rebuilds (``generations``).

The top room: it may import every other room of ``engine``; none imports it.
"""

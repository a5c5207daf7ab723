"""Upkeep: the operator's tools over what is stored.

The completeness audit (``audit``), replaying a range under today's rules (``replay``), bulk
actions by filter as a plan (``bulk_replay``: the dead-letters' replay; ``bulk_actions``: the
cancel of pending rows and the rerun of done ones, A8), the JSON API's tokens (``api_tokens``),
why one row waits (``explain``, with its checks in the package ``holds``), the console's rolling series
(``series``) and read-model generations for shadow rebuilds (``generations``).

The top room: it may import every other room of ``engine``; none imports it.
"""

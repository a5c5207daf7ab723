"""Work: claimed rows run and their outcomes written.

The effect worker (``worker``) and its parts: what a tick claims (``claiming``), one row through
its handler (``executing``), running a claimed batch (``running``) in lanes by tenant
(``lanes``), projection rows applied as one unit (``batch``) with their read-model writes
gathered (``gathered``), the rows the tail hands over (``handoff``), the one writer of a row's
final state (``completer``) with its done marks staged and flushed in bulk (``done_marks``),
what became of a row (``outcomes``), the worker's settings (``worksettings``) and the deadlines
on plugin code (``watchdog``).

May import ``telemetry``, ``flow`` and ``handlers``; never ``tail`` or ``upkeep``.
"""

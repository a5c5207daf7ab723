"""Explicit error types. Ports raise these; adapters translate their driver's errors into them.

The split that matters (ADR-094): a *transient* failure (``StoreUnavailable``) must never be
mistaken for a *definitive* answer (``CardNotFound``, ``SubscriptionNotFound``): the first aborts
and retries, the second skips or drops.
"""

from __future__ import annotations

from typing import Any


class BoardOutboxError(Exception):
    """Base of every error board-outbox raises on purpose."""


class StoreUnavailable(BoardOutboxError):
    """Transient store failure (network, timeout, not primary, ...). Retry later; decide nothing."""


class StoreError(BoardOutboxError):
    """A store rejected an operation for a non-transient reason (bad query, auth, schema...)."""


class BrokenRow(StoreError):
    """A row document whose shape makes a transition fail (``$inc`` on a string ``attempts``,
    ``$push`` on a non-array ``errors``...): the store names it by ``ref`` so that the worker can
    park that one row and carry on (R1)."""

    def __init__(self, ref: object, detail: str) -> None:
        super().__init__(f"row {ref!r}: {detail}")
        self.ref = ref
        self.detail = detail

    def __reduce__(self) -> tuple[type, tuple[object, str]]:
        return (type(self), (self.ref, self.detail))


class CardNotFound(BoardOutboxError):
    """The card is definitively gone (deleted). Events about it are skipped."""

    def __init__(self, tenant_id: str, card_id: str) -> None:
        super().__init__(f"card {card_id!r} of tenant {tenant_id!r} not found")
        self.tenant_id = tenant_id
        self.card_id = card_id

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.tenant_id, self.card_id))


class SubscriptionNotFound(BoardOutboxError):
    """The subscription is definitively gone. Its pending rows are dropped (done, not launched)."""

    def __init__(self, sub_id: str) -> None:
        super().__init__(f"subscription {sub_id!r} not found")
        self.sub_id = sub_id

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (type(self), (self.sub_id,))


class MalformedDocument(BoardOutboxError):
    """A stored document does not decode into its domain type (wrong types, missing fields)."""

    def __init__(self, what: str, ref: object, detail: str) -> None:
        super().__init__(f"malformed {what} {ref!r}: {detail}")
        self.what = what
        self.ref = ref
        self.detail = detail

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_malformed, (type(self), self.what, self.ref, self.detail))


def _rebuild_malformed(cls: type[MalformedDocument], what: str, ref: object, detail: str
                       ) -> MalformedDocument:
    err = MalformedDocument.__new__(cls)
    MalformedDocument.__init__(err, what, ref, detail)
    return err


class MalformedEvent(MalformedDocument):
    def __init__(self, ref: object, detail: str) -> None:
        super().__init__("board event", ref, detail)


class MalformedRow(MalformedDocument):
    def __init__(self, ref: object, detail: str) -> None:
        super().__init__("effect row", ref, detail)


class MalformedCard(MalformedDocument):
    def __init__(self, ref: object, detail: str) -> None:
        super().__init__("card", ref, detail)


class InvalidId(BoardOutboxError, ValueError):
    """An identifier (tenant, subscription, projection) has characters a row key cannot carry."""


class InvalidRowKey(BoardOutboxError, ValueError):
    """A text that cannot be a row key (``model.row_keys.parse_row_key``): say so, look nothing up."""


class RowNotFound(BoardOutboxError):
    """No effect row has this key (``engine.upkeep.explain``): a typo, or a done row past its TTL."""

    def __init__(self, row_key: str) -> None:
        super().__init__(f"no row {row_key!r}")
        self.row_key = row_key

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (type(self), (self.row_key,))


class EffectError(BoardOutboxError):
    """An effect failed; the row is retried with backoff."""


class EffectTimeout(EffectError):
    """A plugin call (an effect, a projection's apply, a handler's prepare) ran past its deadline
    (``worker.max_execution_seconds``) and was cancelled: the attempt counts, the row retries
    with backoff or, past its budget, parks."""


class PermanentEffectError(EffectError):
    """An effect can never succeed; the row parks as failed at once (dead-letter)."""


class CrossTenantRow(PermanentEffectError):
    """A row names a subscription of another tenant: refused, never executed."""


class UnknownEffectKind(PermanentEffectError):
    """No handler is registered for the row's kind."""


class LaunchFailed(EffectError):
    """The launcher could not start the bot (retried)."""


class SlotLost(EffectError):
    """A launch was cut because its in-flight slot ended under it (F2): not renewed before its
    end (the store unreachable, the lease heartbeat stopped) or taken over by another holder.
    Run on outside its slot, it could run beside another launch over the limit; the attempt
    counts and the row retries with backoff, like a launch cut at its deadline."""


class OverLimit(BoardOutboxError):
    """A launch would go over a concurrency or rate limit (F2). Not a failure: the row waits
    ``wait_seconds`` and is claimed again, its attempts unchanged, no error recorded."""

    def __init__(self, scope: str, kind: str, key: str, wait_seconds: float) -> None:
        super().__init__(f"{scope} limit ({kind}) of {key}")
        self.scope = scope  # bot | tenant
        self.kind = kind  # in_flight | per_second
        self.key = key
        self.wait_seconds = wait_seconds

    @property
    def reason(self) -> str:
        return str(self)

    def __reduce__(self) -> tuple[type, tuple[str, str, str, float]]:
        return (type(self), (self.scope, self.kind, self.key, self.wait_seconds))


class Paused(OverLimit):
    """The row's tenant, subscription or bot is paused (F3): not a failure and not an
    attempt; the row is held (``model/pause``) until the pause is lifted. An ``OverLimit`` so
    that it takes the limits' way out of a handler: the worker defers the row."""

    def __init__(self, scope: str, key: str) -> None:
        super().__init__(scope, "paused", key, 0.0)
        self.args = (f"paused: {scope} {key}",)

    def __reduce__(self) -> tuple[type, tuple[str, str]]:  # type: ignore[override]
        return (type(self), (self.scope, self.key))


class Superseded(BoardOutboxError):
    """A coalescing launch row has a newer row of its (subscription, card) that runs
    instead (``into``): the worker moves it to ``coalesced`` (terminal, attempts unchanged)."""

    def __init__(self, into: str) -> None:
        super().__init__(f"superseded by {into}")
        self.into = into

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (type(self), (self.into,))


class CoalesceHold(BoardOutboxError):
    """A coalescing launch row cannot tell yet whether it is superseded (the newest
    row of its (subscription, card) is running right now): pending again after
    ``wait_seconds``, attempts unchanged, no error (the defer transition)."""

    def __init__(self, reason: str, wait_seconds: float) -> None:
        super().__init__(reason)
        self.reason = reason
        self.wait_seconds = wait_seconds

    def __reduce__(self) -> tuple[type, tuple[str, float]]:
        return (type(self), (self.reason, self.wait_seconds))


class LeaseLost(BoardOutboxError):
    """A fenced write found another claim_id: this worker's lease was stolen. Stop, write nothing."""


class ConfigError(BoardOutboxError):
    """Bad or missing configuration. The message names the setting."""


class UsageError(BoardOutboxError):
    """A request that cannot be acted on as given: a command line, a port already in use
    (exit 2, one line on stderr)."""


class ChangeStreamLost(BoardOutboxError):
    """The change stream cannot resume from its token (history lost, invalidated):
    drop the token, let polling reconcile, reopen from now."""


class RebuildConflict(BoardOutboxError):
    """A shadow rebuild's generation pointer changed under it (another rebuild, a drop): the
    live read model is untouched; run the rebuild again."""


class ProjectionFailed(BoardOutboxError):
    """A projection raised while a rebuild replayed the log (a bug in its code): the rebuild
    stops, one line names the projection, the seqs and the error; a shadow rebuild drops its
    shadow (the live read model is untouched)."""

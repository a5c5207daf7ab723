"""Subscriptions and matching: what a tenant wants done, and which events want it.

``matches`` is pure (used at materialization and re-verified when a row runs);
``SubscriptionIndex`` finds a tenant's candidates for one event without scanning them all.
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

from board_outbox.model.board import EventSnapshot
from board_outbox.model.bounds import InFlight, PerSecond, Priority
from board_outbox.model.ids import LAUNCH


class MatchRule(msgspec.Struct, frozen=True, kw_only=True):
    """Empty fields match anything. ``labels_all``: the card must carry every one of them."""

    event_types: tuple[str, ...] = ()
    column: str | None = None
    labels_all: tuple[str, ...] = ()


MAX_COALESCE_SECONDS: Final = 86400.0
# a coalescing window's seconds: finite (NaN and infinity fail the bounds), above 0, at most a day
WindowSeconds = Annotated[float, msgspec.Meta(gt=0, le=MAX_COALESCE_SECONDS)]


class Coalesce(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A subscription's coalescing window: a launch row waits ``quiet_seconds`` after
    it was materialized; a newer row of the same (subscription, card) by then supersedes it, so
    a burst of edits launches once, with the newest snapshot -- and no later than
    ``max_wait_seconds`` after the burst's first row (``0 < quiet <= max_wait <= 1 day``)."""

    quiet_seconds: WindowSeconds
    max_wait_seconds: WindowSeconds

    def __post_init__(self) -> None:
        if self.quiet_seconds > self.max_wait_seconds:
            raise ValueError(f"coalesce quiet_seconds {self.quiet_seconds} is above "
                             f"max_wait_seconds {self.max_wait_seconds}")


class Subscription(msgspec.Struct, frozen=True, kw_only=True):
    """What a tenant wants done when an event matches ``rule``: one row of effect ``kind`` per
    matching event (``launch``, the default, launches ``bot``; any other kind is run by the
    handler registered for it, which reads ``bot`` as it likes, e.g. a recipient). A subscription
    stored before ``kind`` existed reads as a launch.

    ``max_in_flight`` / ``max_per_second`` (F2) override the ``[limits]`` bot limits for the
    launches of this subscription (0: no limit; None, or absent: the configured ones).

    ``priority`` (-10..10, default 0) orders the subscription's rows within their tenant's fair
    share (F1, ``model/fairness``): higher first. Each row carries the priority it was
    materialized with, so a change affects only rows materialized after it."""

    sub_id: str
    tenant_id: str
    bot: str
    rule: MatchRule = MatchRule()
    consume_labels: tuple[str, ...] = ()
    enabled: bool = True
    kind: str = LAUNCH
    max_in_flight: InFlight | None = None
    max_per_second: PerSecond | None = None
    priority: Priority = 0
    # --- coalescing (a burst of edits launches once): None (the default) launches once per matching event
    coalesce: Coalesce | None = None


def matches(sub: Subscription, ev: EventSnapshot) -> bool:
    """Does ``sub`` want ``ev``? Pure; used at materialization and re-verified at execution."""
    if not sub.enabled or ev.deleted:
        return False
    rule = sub.rule
    if rule.event_types and ev.type not in rule.event_types:
        return False
    if rule.column is not None and ev.column != rule.column:
        return False
    if rule.labels_all and not set(rule.labels_all).issubset(ev.labels):
        return False
    # A consume_labels subscription fires only while its one-shot labels are on the card.
    return not (sub.consume_labels and not set(sub.consume_labels).issubset(ev.labels))


class SubscriptionIndex:
    """A tenant's enabled subscriptions indexed by (event type, column), so matching an event
    costs what its candidates cost, not what the tenant's subscription count costs."""

    def __init__(self, subs: list[Subscription]) -> None:
        self._by: dict[tuple[str | None, str | None], list[Subscription]] = {}
        for sub in subs:
            if not sub.enabled:
                continue
            for etype in sub.rule.event_types or (None,):
                self._by.setdefault((etype, sub.rule.column), []).append(sub)

    def matching(self, ev: EventSnapshot) -> list[Subscription]:
        out: list[Subscription] = []
        get = self._by.get
        for key in ((ev.type, ev.column), (ev.type, None), (None, ev.column), (None, None)):
            for sub in get(key, ()):
                if matches(sub, ev):
                    out.append(sub)
        return out

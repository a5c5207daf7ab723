"""The subscription index must select exactly what brute-force ``matches`` selects."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from board_outbox.model.board import EventSnapshot
from board_outbox.model.subscriptions import MatchRule, Subscription, SubscriptionIndex, matches

TYPES = ["card.created", "card.moved", "card.labeled"]
COLUMNS = ["", "inbox", "review"]
LABELS = ["ship", "bug"]

rules = st.builds(
    MatchRule,
    event_types=st.lists(st.sampled_from(TYPES), unique=True, max_size=2).map(tuple),
    column=st.none() | st.sampled_from(COLUMNS),
    labels_all=st.lists(st.sampled_from(LABELS), unique=True, max_size=2).map(tuple),
)
subs = st.lists(
    st.builds(Subscription, sub_id=st.uuids().map(str), tenant_id=st.just("t"),
              bot=st.just("b"), rule=rules, enabled=st.booleans(),
              consume_labels=st.lists(st.sampled_from(LABELS), max_size=1).map(tuple)),
    max_size=12,
)
events = st.builds(
    EventSnapshot, seq=st.integers(1, 9), type=st.sampled_from(TYPES), card_id=st.just("c"),
    column=st.sampled_from(COLUMNS),
    labels=st.lists(st.sampled_from(LABELS), unique=True).map(tuple), deleted=st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(subs, events)
def test_index_equals_brute_force(ss: list[Subscription], ev: EventSnapshot) -> None:
    want = sorted(s.sub_id for s in ss if matches(s, ev))
    got = sorted(s.sub_id for s in SubscriptionIndex(ss).matching(ev))
    assert got == want


SHIP_SUB = Subscription(sub_id="s", tenant_id="t", bot="b",
                        rule=MatchRule(event_types=("card.labeled",), column="review",
                                       labels_all=("bug",)),
                        consume_labels=("ship",))
HIT = EventSnapshot(seq=1, type="card.labeled", card_id="c", column="review",
                    labels=("bug", "ship"))


@pytest.mark.parametrize(
    ("why", "sub", "ev", "want"),
    [
        ("every condition holds", SHIP_SUB, HIT, True),
        ("another event type", SHIP_SUB, msgspec.structs.replace(HIT, type="card.moved"), False),
        ("another column", SHIP_SUB, msgspec.structs.replace(HIT, column="inbox"), False),
        ("a labels_all label missing", SHIP_SUB, msgspec.structs.replace(HIT, labels=("ship",)),
         False),
        ("the one-shot label already spent", SHIP_SUB,
         msgspec.structs.replace(HIT, labels=("bug",)), False),
        ("a deleted card", SHIP_SUB, msgspec.structs.replace(HIT, deleted=True), False),
        ("a disabled subscription", msgspec.structs.replace(SHIP_SUB, enabled=False), HIT, False),
        ("a column-only rule", Subscription(sub_id="r", tenant_id="t", bot="b",
                                            rule=MatchRule(column="review")), HIT, True),
        ("an empty rule matches anything live", Subscription(sub_id="a", tenant_id="t", bot="b"),
         EventSnapshot(seq=1, type="card.moved", card_id="c"), True),
    ],
)
def test_matches_checks_each_condition(why: str, sub: Subscription, ev: EventSnapshot,
                                       want: bool) -> None:
    """Each condition of ``matches`` on its own: the index test above compares the index with
    ``matches`` and cannot see a condition both of them lose."""
    assert matches(sub, ev) is want, why
    assert bool(SubscriptionIndex([sub]).matching(ev)) is want, why

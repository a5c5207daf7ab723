"""The subscription index must select exactly what brute-force ``matches`` selects."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from board_outbox.domain import EventSnapshot, MatchRule, Subscription, SubscriptionIndex, matches

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

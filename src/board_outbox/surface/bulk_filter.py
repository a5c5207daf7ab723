"""A bulk replay's filter as an operator writes it -- ``key=value`` terms (the CLI's ``--filter``)
or the console's form fields -- parsed into a ``BulkFilter``, and a plan printed as text. Every
bad term is one ``UsageError`` naming it (the CLI: one line, exit 2; the console: a 400 page)."""

from __future__ import annotations

from collections.abc import Iterable

from board_outbox.model import times
from board_outbox.model.dead_letters import DEFAULT_BULK_LIMIT, NOUNS, BulkFilter, BulkPlan
from board_outbox.model.errors import InvalidId, UsageError
from board_outbox.model.ids import check_id
from board_outbox.model.rows import FAILED
from board_outbox.surface.admin import parse_when

MAX_LIMIT = 2**31 - 1
MAX_TEXT = 500  # an error substring's length, a bot's

# what each key means (aliases: the dead-letters commands' own flag names)
KEYS = {
    "tenant": "tenant", "kind": "kind", "subscription": "subscription", "sub": "subscription",
    "bot": "bot", "error": "error", "error-class": "error_class", "error_class": "error_class",
    "since": "since", "failed-since": "since", "before": "before", "until": "before",
    "failed-before": "before", "limit": "limit",
}
TERMS = ("tenant=T, kind=K, subscription=S, bot=B, error=TEXT, error-class=NAME, since=WHEN, "
         "before=WHEN, limit=N")


def split_term(term: str) -> tuple[str, str]:
    """``key=value`` -> (key, value); the value may hold ``=`` itself."""
    key, sep, value = term.partition("=")
    if not sep:
        raise UsageError(f"--filter {term!r}: expected KEY=VALUE, one of {TERMS}")
    return key.strip().lower(), value.strip()


def parse_filter(pairs: Iterable[tuple[str, str]], *, now: float) -> BulkFilter:
    """The filter of ``(key, value)`` pairs; a key given twice must say the same thing."""
    fields: dict[str, object] = {}
    for key, value in pairs:
        name = KEYS.get(key)
        if name is None:
            raise UsageError(f"--filter: unknown key {key!r}: use {TERMS}")
        parsed = _value(key, name, value, now)
        if name in fields and fields[name] != parsed:
            raise UsageError(f"--filter: {key} given twice ({fields[name]!r} and {parsed!r})")
        fields[name] = parsed
    flt = BulkFilter(**fields)  # type: ignore[arg-type]
    if flt.since is not None and flt.before is not None and flt.since >= flt.before:
        raise UsageError("--filter: since must be earlier than before: nothing could match")
    return flt


def _value(key: str, name: str, value: str, now: float) -> object:
    if not value:
        raise UsageError(f"--filter: {key}= needs a value")
    if not value.isprintable():
        raise UsageError(f"--filter: {key}: only printable characters")
    if name == "limit":
        if not value.isdigit() or not 0 < int(value) <= MAX_LIMIT:
            raise UsageError(f"--filter: limit={value}: expected a whole number from 1 to {MAX_LIMIT}")
        return int(value)
    if name in ("since", "before"):
        try:
            return parse_when(value, now)
        except ValueError as exc:
            raise UsageError(f"--filter: {key}: {exc}") from None
    if name in ("tenant", "kind", "subscription"):
        try:
            return check_id(name, value)
        except InvalidId as exc:
            raise UsageError(f"--filter: {exc}") from None
    if name == "error_class" and not value.replace(".", "_").isidentifier():
        raise UsageError(f"--filter: error-class={value!r}: expected an exception's name "
                         "(LaunchFailed, TimeoutError) or an error kind (lease_expired, permanent)")
    if len(value) > MAX_TEXT:
        raise UsageError(f"--filter: {key}: at most {MAX_TEXT} characters")
    return value


def default_limit(flt: BulkFilter, limit: int | None) -> BulkFilter:
    """``--limit`` (the dead-letters commands' flag) when no ``limit=`` term was given."""
    import msgspec

    if limit is None or flt.limit != DEFAULT_BULK_LIMIT:
        return flt
    return msgspec.structs.replace(flt, limit=limit)


def plan_lines(plan: BulkPlan, *, top: int = 10) -> list[str]:
    """The plan as the CLI prints it: what matched, then the counts by tenant, kind and
    subscription (the ``top`` largest of each, the rest summed)."""
    def when(t: float | None) -> str:
        return times.when(t, fmt="%Y-%m-%d %H:%M:%S")

    flt = plan.filter
    noun = NOUNS.get(flt.state, "row")
    if flt.include_expired:
        noun = "row"
    out = [f"plan: {plan.matched} {noun}{'s' if plan.matched != 1 else ''} match "
           f"{flt.describe()}" + (" (the limit: more may match)" if plan.truncated else "")]
    if flt.include_expired:
        out.append(f"  {plan.pending} pending, {plan.expired} claimed with an expired lease "
                   "(holder presumed dead)" + (f"; {plan.live} claimed with a live lease left "
                                               "alone" if plan.live else ""))
        if plan.claimed_capped:
            out.append("  more claimed rows than one read holds: those with the oldest leases "
                       "were not read (run it again once the fleet's in-flight rows drop)")
    if plan.matched:
        verb = "parked" if flt.state == FAILED else "last changed"
        out.append(f"  {verb} {when(plan.oldest)} .. {when(plan.newest)} UTC, oldest first")
    for label, counts in (("tenant", plan.by_tenant), ("kind", plan.by_kind),
                          ("subscription", plan.by_subscription)):
        if not counts:
            continue
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        shown = ", ".join(f"{k} {n}" for k, n in ranked[:top])
        rest = sum(n for _, n in ranked[top:])
        more = f", {len(ranked) - top} more {rest}" if rest else ""
        out.append(f"  by {label + ':':14}{shown}{more}")
    if plan.already_rerun:
        out.append(f"  {plan.already_rerun} more re-run already, left out: their history names a "
                   "rerun, or they are a rerun (--include-rerun re-runs them again)")
    if plan.one_shot:
        out.append(f"  {plan.one_shot} more of one-shot (consume_labels) subscriptions left out: "
                   "their labels were spent by the first run (--include-one-shot takes them)")
    if plan.unreadable:
        out.append(f"  {plan.unreadable} matching document{'s' if plan.unreadable != 1 else ''} "
                   f"do not decode and are left alone (`board-outbox explain KEY` says why): "
                   + ", ".join(plan.unreadable_keys))
    return out

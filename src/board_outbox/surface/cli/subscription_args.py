"""The ``subscriptions`` command's arguments: its actions and the flags that describe a
subscription (``add`` sets them, ``edit`` changes the ones given)."""

from __future__ import annotations

import argparse
from typing import Any

from board_outbox.surface.cli.argtypes import number

__all__ = ["SUBSCRIPTIONS_HELP", "add_subscriptions", "coalesce_arg", "limit_arg", "priority_arg",
           "rate_arg"]

SUBSCRIPTIONS_HELP = (
    "add, list, show, edit, disable, enable or remove subscriptions",
    "A subscription is what a tenant wants done when an event matches its rule: one row\n"
    "of its effect kind (launch, by default: a launch of its bot) per matching event.\n"
    "Every write is checked the way the service reads a stored subscription (a rule,\n"
    "bot, kind, coalesce window or priority it would refuse is one line, exit 2, and\n"
    "nothing is written), is conditional on the revision read (two operators at once:\n"
    "the second is told, exit 1) and is audited in the subscription's document (action,\n"
    "who, when, what changed; `show` lists it). The running replicas see a change at\n"
    "their next batch: events materialized from then on follow it. Disabling stops new\n"
    "rows and drops the subscription's pending launches when they come up (they are\n"
    "checked against it again, M10b); `pause --subscription` holds them instead.",
)


def priority_arg(text: str) -> int:
    value = number(int, text)
    if not -10 <= value <= 10:
        raise argparse.ArgumentTypeError(f"expected a whole number from -10 to 10, got {value}")
    return int(value)


def limit_arg(text: str) -> int:
    value = number(int, text)
    if not 0 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"expected 0 (no limit) to 1000, got {value}")
    return int(value)


def rate_arg(text: str) -> float:
    value = number(float, text)
    if not 0 <= value <= 1_000_000:  # nan fails too
        raise argparse.ArgumentTypeError(f"expected launches a second, 0 (no limit) to "
                                         f"1000000, got {text}")
    return float(value)


def coalesce_arg(text: str) -> dict[str, Any]:
    """``QUIET:MAX_WAIT`` seconds -> the stored ``coalesce`` window (the decoder checks the
    bounds, and that quiet <= max wait)."""
    quiet, sep, wait = text.partition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected QUIET:MAX_WAIT in seconds (e.g. 5:60), got "
                                         f"{text!r}")
    return {"quiet_seconds": number(float, quiet), "max_wait_seconds": number(float, wait)}


def _describe(p: argparse.ArgumentParser, *, editing: bool) -> None:
    """The flags that describe a subscription. ``edit``: each replaces that field (a
    repeatable flag, the whole list), the --no-* flags clear one."""
    g = p.add_argument_group("the subscription")
    if not editing:
        g.add_argument("--tenant", help="the tenant it belongs to (required without --file)")
    g.add_argument("--bot", help="launch: the bot launched; another kind: what its handler "
                                 "reads (a recipient...)" + ("" if editing else
                                                             " (required without --file)"))
    g.add_argument("--kind", help="the effect kind of its rows (default launch; another kind "
                                  "needs its handler in [handlers])")
    g.add_argument("--event-type", action="append", dest="event_types", metavar="TYPE",
                   help="match only events of this type (card.created, card.moved...); "
                        "repeatable; none: any type")
    g.add_argument("--column", help="match only cards in this column")
    g.add_argument("--label", action="append", dest="labels_all", metavar="LABEL",
                   help="match only cards carrying this label (repeatable: all of them)")
    g.add_argument("--consume-label", action="append", dest="consume_labels", metavar="LABEL",
                   help="a one-shot label: fire only while the card carries it, and remove "
                        "it when launching (repeatable)")
    g.add_argument("--priority", type=priority_arg, metavar="N",
                   help="-10..10, higher first within the tenant's share (default 0)")
    g.add_argument("--coalesce", type=coalesce_arg, metavar="QUIET:MAX_WAIT",
                   help="launch once per burst of a card's events: wait QUIET seconds after "
                        "the newest, never more than MAX_WAIT after the first (e.g. 5:60)")
    g.add_argument("--max-in-flight", type=limit_arg, metavar="N",
                   help="its launches running at once (0: no limit; default: [limits])")
    g.add_argument("--max-per-second", type=rate_arg, metavar="R",
                   help="its launches a second (0: no limit; default: [limits])")
    if editing:
        g.add_argument("--any-event-type", action="store_true",
                       help="match events of any type again")
        g.add_argument("--any-column", action="store_true", help="match cards in any column")
        g.add_argument("--no-labels", action="store_true", help="drop the --label condition")
        g.add_argument("--no-consume-labels", action="store_true",
                       help="drop the one-shot labels")
        g.add_argument("--no-coalesce", action="store_true",
                       help="launch once per matching event again")
        g.add_argument("--default-limits", action="store_true",
                       help="drop its own limits: [limits] applies again")
    else:
        g.add_argument("--disabled", action="store_true",
                       help="add it disabled (`subscriptions enable` turns it on)")
        g.add_argument("--file", metavar="FILE",
                       help="the subscription as a JSON document (`-`: standard input): its "
                            "stored fields, or what `subscriptions show --json` prints")
    g.add_argument("--force", action="store_true",
                   help="accept an effect kind this configuration has no handler for")


def add_subscriptions(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    acts = parser.add_subparsers(dest="subs_command", metavar="ACTION", required=True)
    who = argparse.ArgumentParser(add_help=False)
    who.add_argument("--by", default="", help="who does this (the audit; default $USER)")
    out = argparse.ArgumentParser(add_help=False)
    out.add_argument("--json", action="store_true", help="one JSON document (schema 1)")

    ls = acts.add_parser("list", parents=[common, out], help="the subscriptions, by id",
                         description="The subscriptions, by id (one tenant's with --tenant). "
                                     "A stored document the service cannot read is listed by "
                                     "its id with the reason (the service ignores it).")
    ls.add_argument("--tenant", help="only this tenant's")
    show = acts.add_parser("show", parents=[common, out], help="one subscription and its audit",
                           description="One subscription: what it does, its fields and the "
                                       "audit of the operators' writes.")
    show.add_argument("sub_id", metavar="SUB_ID")
    add = acts.add_parser("add", parents=[common, who, out], help="add a subscription",
                          description="Add a subscription (an id that exists is exit 2).")
    add.add_argument("sub_id", metavar="SUB_ID", nargs="?",
                     help="its id (1-200 of A-Z a-z 0-9 _ . : @ -); with --file: the file's")
    _describe(add, editing=False)
    edit = acts.add_parser("edit", parents=[common, who, out], help="change a subscription",
                           description="Change the fields given; the others stay. Its id and "
                                       "tenant never change. Events materialized from then on "
                                       "follow the change; rows already written keep theirs.")
    edit.add_argument("sub_id", metavar="SUB_ID")
    _describe(edit, editing=True)
    for name, what in (("disable", "stop materializing its rows; its pending launches are "
                                   "dropped when they come up"),
                       ("enable", "materialize its rows again, from the next event on")):
        act = acts.add_parser(name, parents=[common, who, out], help=what,
                              description=what[0].upper() + what[1:] + ".")
        act.add_argument("sub_id", metavar="SUB_ID")
    rm = acts.add_parser("rm", parents=[common, who, out], help="remove a subscription",
                         description="Remove a subscription (a stored document that does not "
                                     "decode too). Its pending launches are dropped when they "
                                     "come up. Prints the document removed (`add --file` "
                                     "restores it). Asks first unless --yes.")
    rm.add_argument("sub_id", metavar="SUB_ID")
    rm.add_argument("--yes", action="store_true", help="do not ask")

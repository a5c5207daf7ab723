"""The ``rows`` command's arguments (A8): ``cancel`` and ``rerun`` by filter, as a plan, and
``find`` by card, event, seq range, row key or state."""

from __future__ import annotations

import argparse

from board_outbox.surface.cli.argtypes import positive_int, rate

__all__ = ["ROWS_HELP", "add_rows"]

ROWS_HELP = (
    "cancel pending rows or re-run done ones by filter (as a plan), find rows",
    "Operators' tools over the effect rows.\n\n"
    "rows cancel --filter KEY=VALUE ... --reason TEXT: cancel pending rows (terminal state\n"
    "`cancelled`: never launched; who, when and why in each row's audit entry; expires after\n"
    "[retention] cancelled_seconds). A claimed row is never touched, unless --include-expired:\n"
    "then claimed rows whose lease had ended when the plan was read are cancelled too (counted\n"
    "apart), their holder presumed dead as when a replica reclaims an expired lease; a holder\n"
    "that beats or a replica that reclaims first wins. A launch already under way in a holder\n"
    "alive but stalled cannot be recalled: only its mark is refused.\n\n"
    "rows rerun --filter ...: re-run done rows as new rows (key ROW_KEY/rerun/N, `rerun_of`\n"
    "naming the done row: the bot sees a new Idempotency-Key, the history keeps both); rows of\n"
    "one-shot (consume_labels) subscriptions are left out unless --include-one-shot, and rows\n"
    "re-run already (their history names a rerun, or they are a rerun) unless --include-rerun\n"
    "(then N counts up: /rerun/2...). So a rerun killed midway is finished by running the same\n"
    "command again: it re-runs only the rows the first did not reach, each once.\n\n"
    "Both take dead-letters replay's steps: the plan first (the matching rows counted by\n"
    "tenant, kind and subscription), nothing written until --yes or a y on the terminal, then\n"
    "one fenced write a row at most --rate rows a second with a progress bar; a row changed\n"
    "since the plan (claimed by a replica, retried, cancelled by another operator) is skipped,\n"
    "so a replica's claim and a cancel never both win, and applies running at once cancel or\n"
    "re-run each row once. SIGINT/SIGTERM stop between two\n"
    "rows (exit 130). Filter keys: tenant, kind, subscription, bot, error, error-class, since,\n"
    "before (last changed), limit.\n\n"
    "rows find: the rows of a card (--card ID, with --tenant), of an event (--event\n"
    "TENANT:SEQ), of a seq range (--seq-range A..B, with --tenant), one row (--row-key K) or\n"
    "those in a state (--state S, optionally --tenant), newest first, at most --limit; each\n"
    "form is one query served by an index (docs/scaling.md). Bad input: one line, exit 2.",
)


def add_rows(rows: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    acts = rows.add_subparsers(dest="rows_command", metavar="ACTION", required=True)
    for name, what in (("cancel", "cancel pending rows by filter, as a plan"),
                       ("rerun", "re-run done rows by filter as new rows, as a plan")):
        p = acts.add_parser(name, parents=[common], help=what, description=what + ".")
        p.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE",
                       dest="terms", required=True,
                       help="only rows with KEY=VALUE (repeatable; at least one)")
        p.add_argument("--by", default="", help="who acts (audit; default $USER)")
        p.add_argument("--dry-run", action="store_true", help="print the plan only")
        p.add_argument("--yes", action="store_true", help="apply the plan without asking")
        p.add_argument("--rate", type=rate, default=None, metavar="ROWS",
                       help="at most ROWS rows a second (default 50)")
        p.add_argument("--json", action="store_true",
                       help="the plan, then the summary, as JSON; the progress bar on stderr")
        if name == "cancel":
            p.add_argument("--reason", required=True, metavar="TEXT",
                           help="why (kept in each row's audit entry and outcome)")
            p.add_argument("--include-expired", action="store_true",
                           help="also cancel claimed rows whose lease had expired when the plan "
                                "read them (holder presumed dead; one still running cannot be "
                                "recalled, its mark is refused)")
        else:
            p.add_argument("--include-one-shot", action="store_true",
                           help="re-run rows of consume_labels subscriptions too (their "
                                "labels were spent: the rerun launches without them)")
            p.add_argument("--include-rerun", action="store_true",
                           help="re-run rows re-run already too (their history names a rerun, "
                                "or they are a rerun): a second rerun of each, ROW_KEY/rerun/2...")
    find = acts.add_parser("find", parents=[common], help="find rows by card, event, seq "
                           "range, row key or state", description="Find rows; newest first.")
    form = find.add_mutually_exclusive_group(required=True)
    form.add_argument("--card", metavar="ID", help="the rows of this card (with --tenant)")
    form.add_argument("--event", metavar="TENANT:SEQ", help="the rows of this event")
    form.add_argument("--seq-range", metavar="A..B", help="the rows of seqs A to B, both "
                      "included (with --tenant)")
    form.add_argument("--row-key", metavar="K", help="this row")
    form.add_argument("--state", help="the rows in this state (pending, claimed, done, "
                      "failed, coalesced, cancelled)")
    find.add_argument("--tenant", help="the tenant (--card and --seq-range need it)")
    find.add_argument("--limit", type=positive_int, default=100, help="at most N rows "
                      "(default 100, at most 10000)")
    find.add_argument("--json", action="store_true", help="one JSON document per row")

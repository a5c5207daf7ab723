"""The arguments of the operator's repair tools over one tenant's event log: ``rebuild`` (a
projection's read model from seq 0, or a shadow generation beside it), ``cursor`` (show or reset
where the tail reads), ``audit`` (every passed event has its rows) and ``replay`` (the rows a
range owes under today's rules)."""

from __future__ import annotations

import argparse

from board_outbox.surface.cli.argtypes import first_seq, json_flag, positive_float, positive_int, seq_arg

__all__ = ["REPAIR_HELP", "add_audit", "add_cursor", "add_rebuild", "add_replay"]

REPAIR_HELP: dict[str, tuple[str, str]] = {  # name -> (help, description)
    "rebuild": (
        "rebuild a projection's read model from seq 0",
        "Reset PROJECTION's read model for one tenant and replay the tenant's events from\n"
        "seq 0, with a progress bar. Stops at a young seq gap (an insert may still be in\n"
        "flight) rather than stepping over it; older gaps are dead allocations and are\n"
        "stepped over. Safe while the service runs: its projection rows carry on from there.\n"
        "Readers see the model emptied and refilled; with --shadow they never do: the next\n"
        "generation is built beside the live one (the running service's projection rows\n"
        "write both) and caught up to the end of the log; then it is compared with the live\n"
        "one (documents added, removed and changed, with examples) and, only when told\n"
        "(--swap, or --swap-if-unchanged when nothing differs), swapped in with one atomic\n"
        "pointer update and the old one removed. Without a swap flag --shadow stops before\n"
        "the swap: the shadow stays, kept current by the rows, and the same command with\n"
        "--swap resumes and swaps. An interrupted --shadow run resumes where it stopped when\n"
        "run again; --drop-shadow discards it. Neither writes a row or fires a launch. Deploy\n"
        "new projection code to the replicas before rebuilding. Exit 3: --shadow waited\n"
        "--gap-wait for a young gap and left the shadow to resume; exit 1: --swap-if-unchanged\n"
        "found differences and did not swap.",
    ),
    "audit": (
        "check that every event the cursor passed has its rows, and every row its event",
        "Completeness audit of one tenant, for the events in --since..cursor: every enabled\n"
        "projection's row must exist (a row owed for an event older than the shortest\n"
        "[retention] may have run and expired: it is counted as presumably expired, never as\n"
        "missing), and\n"
        "every row must belong to an event still in the log (a launch row also to one of the\n"
        "tenant's subscriptions, a projection row to an enabled projection): the others are\n"
        "orphans, reported only. --repair re-materializes the missing rows the tail's way\n"
        "(its row construction, one $setOnInsert bulk upsert keyed by row key): safe to run\n"
        "twice or under a running service. Exit 1 when rows are missing (and --repair was not\n"
        "given), 0 otherwise; an unknown tenant is exit 2.",
    ),
    "replay": (
        "list (--dry-run) or write the rows a range of events owes under the current rules",
        "Materialize the tenant's events --since..cursor again under the CURRENT rules (today's\n"
        "subscriptions, projections and cards), keyed as the tail keys them. Each row is:\n"
        "fire (not stored: written now, then run by a worker), queued (pending or claimed\n"
        "already), done (already ran: a replay never runs it again), dead-letter (use\n"
        "`dead-letters replay`), maybe-expired (not stored, but its event is older than the\n"
        "shortest [retention]: it may have run and expired, so it is never re-created).\n"
        "--dry-run lists\n"
        "what would fire and writes nothing. --subscription limits it to one subscription's\n"
        "launch rows. The write is one $setOnInsert bulk upsert per chunk: running it twice,\n"
        "or racing the tail, writes each row once. Unknown tenant or subscription: exit 2.",
    ),
    "cursor": (
        "show or reset one tenant's cursor (the remedy for a cursor ahead of its counter)",
        "show: the tenant's cursor and its counter (the last allocated seq).\n"
        "reset --to N: set the cursor to N (<= the counter). A cursor ahead of its counter\n"
        "(restored from a backup, hand-edited) is held by every replica -- logged, counted\n"
        "in board_outbox_cursor_ahead, /readyz not ready, listed by status -- because\n"
        "draining on would skip the events numbered up to it. Reset it to the last seq you\n"
        "know was materialized (or lower: events whose rows exist cost nothing, rows are\n"
        "inserted once per event); the replicas drain from there on their next poll.",
    ),
}


def add_rebuild(rb: argparse.ArgumentParser) -> None:
    rb.add_argument("projection", metavar="PROJECTION", help="e.g. board-reflect")
    rb.add_argument("--tenant", required=True, help="the tenant to rebuild")
    rb.add_argument("--batch-size", type=positive_int, default=1000,
                    help="events read per query (default 1000)")
    mode = rb.add_mutually_exclusive_group()
    mode.add_argument("--shadow", action="store_true",
                      help="build the next generation beside the live one, then swap atomically "
                           "(resumes an interrupted shadow rebuild)")
    mode.add_argument("--drop-shadow", action="store_true",
                      help="discard an interrupted shadow rebuild; the live model is untouched")
    swap = rb.add_mutually_exclusive_group()
    swap.add_argument("--swap", action="store_true",
                      help="--shadow: swap the new generation in once caught up (without a swap "
                           "flag --shadow stops before the swap and reports the diff)")
    swap.add_argument("--swap-if-unchanged", action="store_true",
                      help="--shadow: swap only if the new generation equals the live one "
                           "(otherwise report the diff, keep the shadow, exit 1)")
    rb.add_argument("--diff-examples", type=positive_int, default=3, metavar="N",
                    help="--shadow: examples shown per kind of difference (default 3)")
    rb.add_argument("--gap-wait", type=positive_float, default=None, metavar="SECONDS",
                    help="--shadow: how long to wait out a young seq gap before leaving the "
                         "shadow to resume later (default: 2 x tail.young_gap_seconds)")
    json_flag(rb, "the result as one JSON document (the progress bar stays on stderr)")


def add_cursor(cur: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    curs = cur.add_subparsers(dest="cursor_command", metavar="ACTION", required=True)
    cshow = curs.add_parser("show", parents=[common], help="the tenant's cursor and counter",
                            description="Show the tenant's cursor and its counter.")
    cshow.add_argument("--tenant", required=True)
    json_flag(cshow, "one JSON document: tenant_id, cursor, counter, held, ahead")
    creset = curs.add_parser("reset", parents=[common], help="set the tenant's cursor",
                             description="Set the tenant's cursor to N (at most its counter).")
    creset.add_argument("--tenant", required=True)
    creset.add_argument("--to", type=seq_arg, required=True, metavar="N",
                        help="the last seq materialized: the replicas drain from N + 1")
    json_flag(creset, "one JSON document: tenant_id, before, after, counter")


def add_audit(au: argparse.ArgumentParser) -> None:
    au.add_argument("--tenant", required=True, help="the tenant to audit (unknown: exit 2)")
    au.add_argument("--since", type=first_seq, default=1, metavar="SEQ",
                    help="audit events from this seq on (default 1: the whole log)")
    au.add_argument("--repair", action="store_true",
                    help="re-materialize the missing rows (idempotent)")
    au.add_argument("--json", action="store_true", help="the whole report as one JSON document")
    au.add_argument("--limit", type=positive_int, default=20,
                    help="findings printed per kind (default 20; --json prints all)")
    au.add_argument("--batch-size", type=positive_int, default=500,
                    help="events read per query (default 500)")


def add_replay(rpl: argparse.ArgumentParser) -> None:
    rpl.add_argument("--tenant", required=True, help="the tenant (unknown: exit 2)")
    rpl.add_argument("--since", type=first_seq, required=True, metavar="SEQ",
                     help="replay events from this seq on, up to the cursor")
    rpl.add_argument("--subscription", metavar="SUB_ID",
                     help="only this subscription's launch rows (unknown: exit 2)")
    rpl.add_argument("--dry-run", action="store_true", help="list what would fire; write nothing")
    rpl.add_argument("--json", action="store_true", help="the whole plan as one JSON document")
    rpl.add_argument("--all-rows", action="store_true",
                     help="list every planned row, not only those that fire")
    rpl.add_argument("--limit", type=positive_int, default=100,
                     help="rows printed (default 100; --json prints all)")
    rpl.add_argument("--batch-size", type=positive_int, default=500,
                     help="events read per query (default 500)")

"""The ``board-outbox`` argument parser: every command, option and help text."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from board_outbox.surface.cli.argtypes import (
    first_seq,
    fraction,
    port,
    positive_float,
    positive_int,
    rate,
    seq_arg,
    when_arg,
)
from board_outbox.surface.cli.commands.apitokens import API_TOKENS_HELP, add_api_tokens
from board_outbox.surface.cli.rows_args import ROWS_HELP, add_rows
from board_outbox.surface.cli.subscription_args import add_subscriptions

DESCRIPTION = """\
board-outbox turns a changefeed of board events (MongoDB `board_events`) into durable,
exactly-once-in-steady-state effects: bot launches and projection updates (ADR-094).

Configuration: --config FILE (TOML) or BOARD_OUTBOX_CONFIG, overridden by environment
variables BOARD_OUTBOX_<SECTION>__<NAME> (e.g. BOARD_OUTBOX_STORE__URI). Tracing and metrics:
the standard OTEL_* variables (e.g. OTEL_EXPORTER_OTLP_ENDPOINT=http://jaeger:4318).

Run `board-outbox COMMAND --help` for each command."""


# --- parser -------------------------------------------------------------------------------


_COMMANDS: dict[str, tuple[str, str]] = {  # name -> (help, description)
    "demo": (
        "run the whole pipeline on an embedded wire server with a synthetic board",
        "Run the tail, the change-stream waker and the effect worker while a synthetic board\n"
        "emits card events across several tenants. By default the store is a real\n"
        "MongoDB-wire server started as a child process (SecantusDB's secantusd-py, temp\n"
        "storage; --storage keeps it), reached through pymongo with real change streams; if\n"
        "it cannot start, the demo says why in one line and uses the in-memory twin\n"
        "(--store memory asks for the twin). Prints a live summary (events, rows by state,\n"
        "launches, projection updates), checks the result at the end and prints the\n"
        "throughput: exit 0 when every event was materialized once and every row settled,\n"
        "1 otherwise.",
    ),
    "run": (
        "run one replica: change-stream waker, drain loop and effect worker",
        "Run one board-outbox replica until SIGTERM/SIGINT. Start as many replicas as you\n"
        "like against one replica set: there is no leader; the cursor compare-and-set and\n"
        "the leased claims keep materialization and execution exactly-once in steady state.\n"
        "On SIGTERM/SIGINT the worker stops claiming, finishes its in-flight row or gives it\n"
        "back within service.shutdown_grace_seconds, and the process exits 0. A second\n"
        "signal cancels at once (claims are still released). The schema is ensured at start.",
    ),
    "ensure-schema": (
        "create the MongoDB indexes (idempotent)",
        "Create trigger_effects' indexes (the unique row key, one partial index per state the\n"
        "worker reads, (tenant_id, seq) for the audit and replays) and the board_events and\n"
        "read-model indexes, and make the settled rows' TTL indexes follow [retention]: done,\n"
        "coalesced and cancelled rows expire after retention.done_seconds, coalesced_seconds\n"
        "and cancelled_seconds (7 days by default), dead-letters only when\n"
        "retention.failed_seconds is set. A changed retention is applied in place (collMod).\n"
        "Safe to run repeatedly; `run` does it at start.",
    ),
    "dead-letters": (
        "list, show, replay or purge failed rows",
        "Rows that spent their attempt budget (or failed permanently) park as state=failed:\n"
        "the dead-letter queue. These commands are safe while workers run: replay only moves\n"
        "a row that is still failed, and purge only deletes failed rows.",
    ),
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
    "status": (
        "per-tenant cursor, lag, oldest pending row, rows by state, dead-letters",
        "One row per tenant: cursor, allocated seq, lag in events and in seconds (the age of\n"
        "the oldest event past the cursor), the oldest pending or claimed row's age, rows by\n"
        "state and dead-letters. --json prints one stable document: {\"schema\": 1,\n"
        "\"generated_at\": epoch seconds, \"tenants\": [{tenant_id, cursor, allocated_seq,\n"
        "lag_events, lag_seconds, oldest_pending_age_seconds, rows, dead_letters, stalled,\n"
        "stalled_for_seconds}]} (stalled is only known to a running service: see /readyz).\n"
        "An unknown --tenant is an error (exit 2).",
    ),
    "pause": (
        "hold the effects of a tenant, a subscription or a bot until `resume`",
        "Pause one tenant, subscription or bot: every replica reads the pauses once\n"
        "per membership heartbeat (heartbeat_timeout_seconds / 6) and, from then on, holds the\n"
        "rows it pauses instead of running them: each waits (state pending, waiting \"paused:\n"
        "tenant T\") without spending an attempt, and runs in its order after `resume`. The tail\n"
        "keeps materializing (nothing is lost; the oldest pending row's age shows the hold). A\n"
        "tenant or subscription pause holds the launches and the other effect kinds of its\n"
        "subscriptions, never its projection rows (the board's read models stay current); a bot\n"
        "pause holds that bot's launches in every tenant. Rows already running finish. Pausing\n"
        "what is paused already replaces the reason. Recorded (who, when, why) in the pause's\n"
        "audit. An unknown tenant or subscription is exit 2 unless --force.",
    ),
    "resume": (
        "lift a pause: the held rows run again, in their order",
        "Lift the pause of one tenant, subscription or bot: within one heartbeat every replica\n"
        "stops holding its rows and gives the held ones back their own due time, so they run\n"
        "in the order they were due. Recorded in the pause's audit. Exit 1 when it is not\n"
        "paused.",
    ),
    "paused": (
        "list the pauses that are on",
        "The pauses that are on: scope, key, since when, by whom and why. --json prints one\n"
        "document: {\"schema\": 1, \"pauses\": [{scope, key, reason, by, at}],\n"
        "\"bad_documents\": [...]} (a pause document that does not parse pauses nothing; it is\n"
        "listed there, and `pause` writes it whole again).",
    ),
    "explain": (
        "why one row waits: its timeline and what holds it now",
        "The row's timeline (its event's insert, materialization, each failed attempt, operator\n"
        "actions, the deferral or claim in progress, the end), from what the row and the event\n"
        "store record -- the row keeps no per-attempt claim or start times, and says so -- and\n"
        "what holds it now, by name: done; failed (the last error, the replay command); a live\n"
        "lease; an expired lease (stealable); a launch limit (its key and the holders of its\n"
        "slots now); a backoff (until when); the replica that owns its tenant; its turn among\n"
        "the tenant's due rows. ROW_KEY as `dead-letters list` prints it: TENANT/SEQ/sub/SUB_ID\n"
        "or TENANT/SEQ/proj/PROJECTION. Not a row key, or no such row: one line, exit 2.\n"
        "--json prints one stable document ({\"schema\": 1, \"row_key\", \"at\", \"row\",\n"
        "\"holds\": [{\"hold\": NAME, \"summary\", ...}], \"timeline\", \"notes\"}).",
    ),
    "console": (
        "the operator's web console alone, against the configured store",
        "Serve the web console (overview of tenants and replicas, tenant pages, dead-letters\n"
        "with their history) on [ui] host:port (default 127.0.0.1:9465) until SIGTERM/SIGINT.\n"
        "Read-only unless [ui] admin_token is set: then a login with that token may replay\n"
        "dead-letters (confirmed, audited in the row like the CLI's replays). `run` serves the\n"
        "same pages under /ui on its operator port when [ui] enabled = true.",
    ),
    "subscriptions": (
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
    ),
    "doctor": (
        "check the deployment: one line per check, each with what to do",
        "Checks, each on one line with what to do when it fails: the configuration; the\n"
        "store's reachability and server version; a replica set with change streams; the\n"
        "privileges the service needs (docs/operations.md lists the minimal roles); the\n"
        "indexes ensure-schema makes; the TTL indexes against [retention]; the clock against\n"
        "the server's; the oplog window against [doctor] oplog_budget_seconds. Exit 0 when\n"
        "no check fails (warnings allowed), 1 otherwise.",
    ),
    "completion": (
        "print the shell completion script (bash, zsh or tcsh)",
        "Print a completion script for the shell. bash: `board-outbox completion bash >\n"
        "~/.local/share/bash-completion/completions/board-outbox` (or `eval \"$(board-outbox\n"
        "completion bash)\"` in ~/.bashrc); zsh: `board-outbox completion zsh >\n"
        "\"${fpath[1]}/_board-outbox\"`.",
    ),
}


class OneLineParser(argparse.ArgumentParser):
    """Bad input on the command line is one line on stderr, exit 2 (the usage is a --help
    away, not a screenful above the reason)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` shows the usage)\n")


_COMMANDS["rows"] = ROWS_HELP
_COMMANDS["api-tokens"] = API_TOKENS_HELP


def _command(sub: Any, name: str, *parents: argparse.ArgumentParser) -> argparse.ArgumentParser:
    help_, description = _COMMANDS[name]
    parser: argparse.ArgumentParser = sub.add_parser(
        name, parents=list(parents), formatter_class=argparse.RawDescriptionHelpFormatter,
        help=help_, description=description,
    )
    return parser


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = OneLineParser(prog="board-outbox", description=DESCRIPTION, formatter_class=fmt)
    parser.add_argument("--version", action="version", version="%(prog)s " + _version())
    config_help = ("TOML configuration file (default: $BOARD_OUTBOX_CONFIG; without one, "
                   "the BOARD_OUTBOX_* variables must name the store)")
    # --config before the command or after it (the command's own wins): the command's copy
    # sets nothing unless it is given, so it never hides one given before the command
    _file(parser.add_argument("--config", metavar="FILE", default=None, help=config_help))
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    _file(common.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS,
                              help=config_help))

    demo = _command(sub, "demo")
    demo.add_argument("--tenants", type=positive_int, default=3, help="tenants (default 3)")
    demo.add_argument("--store", choices=("embedded", "memory"), default="embedded",
                      help="embedded: a MongoDB-wire server child process (default); "
                           "memory: the in-memory twin")
    demo.add_argument("--storage", metavar="PATH",
                      help="embedded: keep the server's data in PATH (default: a temp dir)")
    demo.add_argument("--events", type=positive_int, default=1000,
                      help="board events to emit (default 1000)")
    demo.add_argument("--rate", type=positive_float, default=1500.0,
                      help="events per second the board emits (default 1500)")
    demo.add_argument("--failure-rate", type=fraction, default=0.1,
                      help="share of launch attempts that fail and are retried (default 0.1)")
    demo.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    demo.add_argument("--timeout", type=positive_float, default=180.0,
                      help="give up after this many seconds (default 180)")
    demo.add_argument("--projection", action="append", default=[], metavar="NAME",
                      help="also run this projection besides board-reflect: a built-in name "
                           "(card-activity), a module:Class topic or an entry-point name; repeatable")

    _command(sub, "run", common)

    _json(_command(sub, "ensure-schema", common), "the indexes created or changed, as JSON")

    dl = _command(sub, "dead-letters", common)
    dls = dl.add_subparsers(dest="dl_command", metavar="ACTION", required=True)
    filt = argparse.ArgumentParser(add_help=False, parents=[common])
    filt.add_argument("--tenant", help="only this tenant")
    filt.add_argument("--since", type=when_arg, help="parked at or after (ISO time, or an age: 2h, 7d)")
    filt.add_argument("--until", type=when_arg, help="parked before (ISO time, or an age: 2h, 7d)")
    filt.add_argument("--limit", type=positive_int, default=None,
                      help="at most N rows (default 100; replay --filter: 10000)")
    ls = dls.add_parser("list", parents=[filt], help="list dead-letters, newest first",
                        description="List dead-letters, newest first.")
    ls.add_argument("--json", action="store_true", help="one JSON document per line")
    show = dls.add_parser("show", parents=[common], help="show one row in full",
                          description="Show one row in full (errors and audit history included).")
    show.add_argument("row_key", metavar="ROW_KEY")
    _json(show, "the stored row as one JSON document")
    rp = dls.add_parser("replay", parents=[filt], formatter_class=fmt,
                        help="return rows to pending with attempts reset",
                        description=(
                            "Return dead-letters to pending with attempts reset. The error history\n"
                            "is kept and an audit entry records who replayed it and when. Name rows\n"
                            "by ROW_KEY, or use --all with the filters.\n\n"
                            "Bulk replay as a plan: --filter KEY=VALUE (repeatable; tenant, kind,\n"
                            "subscription, bot, error (a substring of the last error), error-class,\n"
                            "since, before, limit; --tenant/--since/--until/--limit count too) first\n"
                            "prints the plan: the matching dead-letters counted by tenant, kind and\n"
                            "subscription, oldest parked first, at most limit (default 10000). Nothing\n"
                            "is written until it is confirmed: --yes, or a y on the terminal (not a\n"
                            "terminal and no --yes: exit 2; --dry-run: the plan only, exit 0). Then\n"
                            "each row is replayed by one fenced write, at most --rate rows a second,\n"
                            "with a progress bar; a row changed since the plan (replayed by someone\n"
                            "else, parked again, purged) is skipped. SIGINT/SIGTERM stop it between\n"
                            "two rows: every row is replayed or untouched, and the summary line says\n"
                            "how many of each (exit 130). Each row's audit entry names the bulk\n"
                            "replay; one summary line is logged. Exit 1: the store refused rows or\n"
                            "went away."))
    rp.add_argument("row_keys", metavar="ROW_KEY", nargs="*")
    rp.add_argument("--all", action="store_true", help="replay every dead-letter the filters match")
    rp.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE", dest="terms",
                    help="bulk replay as a plan: only dead-letters with KEY=VALUE (repeatable)")
    rp.add_argument("--by", default="", help="who replays (audit; default $USER)")
    rp.add_argument("--dry-run", action="store_true",
                    help="say what each replay would do under the current rules; change nothing "
                         "(with --filter: print the plan only)")
    rp.add_argument("--yes", action="store_true", help="--filter: apply the plan without asking")
    rp.add_argument("--rate", type=rate, default=None, metavar="ROWS",
                    help="--filter: replay at most ROWS rows a second (default 50)")
    _json(rp, "the rows replayed (with --filter: the plan, then the summary) as JSON; the "
              "progress bar stays on stderr")
    pg = dls.add_parser("purge", parents=[filt], help="delete dead-letters (asks first)",
                        description="Delete the dead-letters the filters match. Asks for "
                                    "confirmation unless --yes.")
    pg.add_argument("--yes", action="store_true", help="do not ask")
    _json(pg, "how many were purged, as JSON")

    rb = _command(sub, "rebuild", common)
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
    _json(rb, "the result as one JSON document (the progress bar stays on stderr)")
    cur = _command(sub, "cursor", common)
    curs = cur.add_subparsers(dest="cursor_command", metavar="ACTION", required=True)
    cshow = curs.add_parser("show", parents=[common], help="the tenant's cursor and counter",
                            description="Show the tenant's cursor and its counter.")
    cshow.add_argument("--tenant", required=True)
    _json(cshow, "one JSON document: tenant_id, cursor, counter, held, ahead")
    creset = curs.add_parser("reset", parents=[common], help="set the tenant's cursor",
                             description="Set the tenant's cursor to N (at most its counter).")
    creset.add_argument("--tenant", required=True)
    creset.add_argument("--to", type=seq_arg, required=True, metavar="N",
                        help="the last seq materialized: the replicas drain from N + 1")
    _json(creset, "one JSON document: tenant_id, before, after, counter")
    au = _command(sub, "audit", common)
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
    rpl = _command(sub, "replay", common)
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
    for name in ("pause", "resume"):
        pz = _command(sub, name, common)
        which = pz.add_mutually_exclusive_group(required=True)
        which.add_argument("--tenant", metavar="T", help=f"{name} this tenant")
        which.add_argument("--subscription", metavar="S", help=f"{name} this subscription")
        which.add_argument("--bot", metavar="B", help=f"{name} this bot (in every tenant)")
        pz.add_argument("--by", default="", help=f"who {name}s (audit; default $USER)")
        if name == "pause":
            pz.add_argument("--reason", default="", metavar="TEXT",
                            help="why (shown by `paused`, the console and the audit)")
            pz.add_argument("--force", action="store_true",
                            help="pause a tenant or subscription the store does not know (yet)")
        _json(pz, f"what the {name} did, as one JSON document")
    pl = _command(sub, "paused", common)
    pl.add_argument("--json", action="store_true", help="one JSON document (schema 1)")
    st = _command(sub, "status", common)
    st.add_argument("--json", action="store_true", help="one stable JSON document (schema 1)")
    st.add_argument("--tenant", help="only this tenant (unknown: exit 2)")
    ex = _command(sub, "explain", common)
    ex.add_argument("row_key", metavar="ROW_KEY", help="e.g. acme/42/sub/triage")
    ex.add_argument("--json", action="store_true", help="one stable JSON document (schema 1)")
    con = _command(sub, "console", common)
    con.add_argument("--host", default=None, help="listen on this address (default: [ui] host, "
                                                  "127.0.0.1)")
    con.add_argument("--port", type=port, default=None,
                     help="listen on this port (default: [ui] port, 9465; 0: any free port)")
    add_subscriptions(_command(sub, "subscriptions", common), common)
    add_rows(_command(sub, "rows", common), common)
    add_api_tokens(_command(sub, "api-tokens", common), common)
    dr = _command(sub, "doctor", common)
    _json(dr, "one JSON document: every check with its status, what it found and what to do")
    comp = _command(sub, "completion")
    comp.add_argument("shell", choices=("bash", "zsh", "tcsh"),
                      help="the shell to print the completion script for")
    return parser


def _json(parser: argparse.ArgumentParser, help_: str) -> argparse.ArgumentParser:
    parser.add_argument("--json", action="store_true", help=help_)
    return parser


def _file(action: argparse.Action) -> None:
    """Complete the option's value as a file name (``completion``)."""
    import shtab

    action.complete = shtab.FILE  # type: ignore[attr-defined]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("board-outbox")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"

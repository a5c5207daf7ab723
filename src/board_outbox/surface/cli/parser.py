"""The ``board-outbox`` argument parser: the top level (``--config`` before or after the
command, ``--version``), one subparser per command with its help, and the small commands'
arguments. A command group with many actions or flags keeps its help and arguments in its
own module (``deadletter_args``, ``repair_args``, ``pause_args``, ``subscription_args``,
``rows_args``, ``commands/apitokens``)."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from board_outbox.surface.cli.argtypes import (
    fraction,
    json_flag,
    port,
    positive_float,
    positive_int,
)
from board_outbox.surface.cli.commands.apitokens import API_TOKENS_HELP, add_api_tokens
from board_outbox.surface.cli.deadletter_args import DEAD_LETTERS_HELP, add_dead_letters
from board_outbox.surface.cli.pause_args import PAUSE_HELP, add_pause, add_paused
from board_outbox.surface.cli.repair_args import REPAIR_HELP, add_audit, add_cursor, add_rebuild, add_replay
from board_outbox.surface.cli.rows_args import ROWS_HELP, add_rows
from board_outbox.surface.cli.subscription_args import SUBSCRIPTIONS_HELP, add_subscriptions

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
    # the command groups' own, beside their arguments
    "dead-letters": DEAD_LETTERS_HELP,
    **REPAIR_HELP,
    **PAUSE_HELP,
    "subscriptions": SUBSCRIPTIONS_HELP,
    "rows": ROWS_HELP,
    "api-tokens": API_TOKENS_HELP,
}


class OneLineParser(argparse.ArgumentParser):
    """Bad input on the command line is one line on stderr, exit 2 (the usage is a --help
    away, not a screenful above the reason)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` shows the usage)\n")


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

    json_flag(_command(sub, "ensure-schema", common), "the indexes created or changed, as JSON")

    add_dead_letters(_command(sub, "dead-letters", common), common)

    add_rebuild(_command(sub, "rebuild", common))
    add_cursor(_command(sub, "cursor", common), common)
    add_audit(_command(sub, "audit", common))
    add_replay(_command(sub, "replay", common))
    for name in ("pause", "resume"):
        add_pause(_command(sub, name, common), name)
    add_paused(_command(sub, "paused", common))
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
    json_flag(dr, "one JSON document: every check with its status, what it found and what to do")
    comp = _command(sub, "completion")
    comp.add_argument("shell", choices=("bash", "zsh", "tcsh"),
                      help="the shell to print the completion script for")
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

"""The ``dead-letters`` command's arguments: ``list``, ``show``, ``replay`` (by row key, every
match, or in bulk as a plan) and ``purge``, and the filters they share."""

from __future__ import annotations

import argparse

from board_outbox.surface.cli.argtypes import json_flag, positive_int, rate, when_arg

__all__ = ["DEAD_LETTERS_HELP", "add_dead_letters"]

DEAD_LETTERS_HELP = (
    "list, show, replay or purge failed rows",
    "Rows that spent their attempt budget (or failed permanently) park as state=failed:\n"
    "the dead-letter queue. These commands are safe while workers run: replay only moves\n"
    "a row that is still failed, and purge only deletes failed rows.",
)


def add_dead_letters(dl: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
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
    json_flag(show, "the stored row as one JSON document")
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
    json_flag(rp, "the rows replayed (with --filter: the plan, then the summary) as JSON; the "
              "progress bar stays on stderr")
    pg = dls.add_parser("purge", parents=[filt], help="delete dead-letters (asks first)",
                        description="Delete the dead-letters the filters match. Asks for "
                                    "confirmation unless --yes.")
    pg.add_argument("--yes", action="store_true", help="do not ask")
    json_flag(pg, "how many were purged, as JSON")

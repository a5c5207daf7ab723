"""The console's bulk replay: "Replay all matching…" on the dead-letters page opens the plan of
the current filter (``GET /dead-letters/plan``: counts by tenant, kind and subscription, reads
only); an admin applies it (``POST /dead-letters/plan/apply``, CSRF-checked like every console
POST), which runs ``engine.upkeep.bulk_replay.apply_bulk_replay`` rate-limited in the background of that
request and sends the browser to its progress page (``/dead-letters/bulk/ID``: replayed,
skipped, remaining; it reloads itself while the replay runs), where an admin may abort it
between two rows. Each row's audit entry says ``console:<name>`` and the bulk replay's id; the
engine logs one summary line. Progress is kept by the console process that runs the replay.

The same routes, under ``/rows/cancel/plan`` and ``/rows/rerun/plan``, plan and apply a bulk
cancel of pending rows ("Cancel all matching…" on the search page; a reason is required; a
checkbox adds the claimed rows whose lease had expired, counted apart) and a
rerun of done rows (A8: the rows re-run already are counted and left out unless a checkbox adds
them); their progress pages are the replay's, and one bulk action runs at a time in a console."""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import msgspec
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from board_outbox.engine.upkeep.bulk_actions import write_of
from board_outbox.engine.upkeep.bulk_replay import (
    DEFAULT_RATE,
    Stop,
    apply_bulk,
    plan_bulk_replay,
)
from board_outbox.model.clock import SystemClock
from board_outbox.model.dead_letters import (
    ACTION_STATES,
    CANCEL,
    DONE_WORDS,
    FAILED_RUN,
    NOUNS,
    REPLAY,
    RERUN,
    RUNNING,
    BulkFilter,
    BulkPlan,
    BulkProgress,
)
from board_outbox.model.errors import UsageError
from board_outbox.ports import Stores
from board_outbox.surface.bulk_filter import parse_filter
from board_outbox.surface.console.security import Sessions, csrf_ok

log = logging.getLogger("board_outbox.console")

# the form's fields -> the filter's keys (the dead-letters page's names, plus bot and errors)
FIELDS = {"tenant": "tenant", "kind": "kind", "sub": "subscription", "bot": "bot",
          "error": "error", "error_class": "error-class", "since": "since", "until": "before",
          "limit": "limit"}
MAX_RATE = 1000.0  # rows a second a console may ask for
KEEP = 20  # finished bulk replays whose progress page stays
# documents a plan page reads at most (a filter the store cannot answer -- a bot, an error --
# reads every dead-letter the rest lets through): past it, the plan covers those read
PLAN_READ_CAP = 50_000


@dataclass
class Job:
    progress: BulkProgress
    stop: Stop = field(default_factory=Stop)


class BulkJobs:
    """This console's bulk replays, newest last: at most one runs at a time."""

    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}

    def running(self) -> Job | None:
        return next((j for j in self.jobs.values() if j.progress.state == RUNNING), None)

    def add(self, job: Job) -> None:
        self.jobs[job.progress.bulk_id] = job
        done = [k for k, j in self.jobs.items() if j.progress.state != RUNNING]
        for k in done[:max(0, len(done) - KEEP)]:
            del self.jobs[k]


Page = Callable[..., Awaitable[Response]]
Refuse = Callable[[Request, str], Awaitable[Response]]


# where each action's plan lives
PLAN_PATHS = {REPLAY: "/dead-letters/plan", CANCEL: "/rows/cancel/plan", RERUN: "/rows/rerun/plan"}
MAX_REASON = 500


def form_filter(values: Mapping[str, str], action: str = REPLAY
                ) -> tuple[dict[str, str], BulkFilter]:
    """The form's fields (stripped, as echoed back) and the filter they make, or a ``UsageError``."""
    form = {name: str(values.get(name, "")).strip() for name in FIELDS}
    flt = parse_filter([(FIELDS[n], v) for n, v in form.items() if v], now=time.time())
    one_shot = _checkbox(values, "include_one_shot")
    if one_shot and action != RERUN:
        raise UsageError(f"include_one_shot: only a rerun takes one-shot rows, not a {action}")
    if one_shot:
        form["include_one_shot"] = "1"
    expired = _checkbox(values, "include_expired")
    if expired and action != CANCEL:
        raise UsageError(f"include_expired: only a cancel takes claimed rows, not a {action}")
    if expired:
        form["include_expired"] = "1"
    again = _checkbox(values, "include_rerun")
    if again and action != RERUN:
        raise UsageError(f"include_rerun: only a rerun takes rows re-run already, not a {action}")
    if again:
        form["include_rerun"] = "1"
    return form, msgspec.structs.replace(flt, state=ACTION_STATES[action],
                                         include_one_shot=one_shot,
                                         include_expired=expired, include_rerun=again)


def _checkbox(values: Mapping[str, str], name: str) -> bool:
    """A checkbox's field: ticked (1) or absent; anything else is a ``UsageError``."""
    value = str(values.get(name, "")).strip()
    if value not in ("", "1"):
        raise UsageError(f"{name}: a checkbox, 1 or absent")
    return value == "1"


def _reason(fields: Mapping[str, str]) -> str:
    reason = str(fields.get("reason", "")).strip()
    if not reason or len(reason) > MAX_REASON or not reason.isprintable():
        raise UsageError(f"a cancel needs a reason: 1 to {MAX_REASON} printable characters")
    return reason


def bulk_routes(*, stores: Stores, page: Page, refused: Refuse, sessions: Sessions,
                admin_token: str, jobs: BulkJobs | None = None,
                action: str = REPLAY) -> list[Route]:
    """The plan and apply routes of ``action``; the replay's also serve every action's
    progress and abort (share ``jobs`` between the actions' routes)."""
    jobs = jobs if jobs is not None else BulkJobs()
    plan_path = PLAN_PATHS[action]
    words = {"action": action, "noun": NOUNS[ACTION_STATES[action]],
             "did": DONE_WORDS[action], "plan_path": plan_path}

    async def plan(request: Request) -> Response:
        try:
            form, flt = form_filter(request.query_params, action)
        except UsageError as exc:
            return await page(request, "bulk_plan.html", 400, form=dict.fromkeys(FIELDS, ""),
                              plan=None, error=str(exc), running=jobs.running(), rate=DEFAULT_RATE,
                              **words)
        got = await plan_bulk_replay(stores.outbox, stores.subs, flt, clock=SystemClock(),
                                     max_read=PLAN_READ_CAP)
        return await page(request, "bulk_plan.html", form=form, plan=got, error=None,
                          running=jobs.running(), rate=DEFAULT_RATE,
                          newest=repr(got.newest) if got.newest is not None else "",
                          planned_at=repr(got.planned_at), **words)

    async def admin_form(request: Request) -> tuple[dict[str, str], str] | Response:
        """The posted fields after the safety checks (the replay's own), or the refusal."""
        if not admin_token:
            return await refused(request, "This console is read-only: no [ui] admin_token is configured.")
        async with request.form(max_files=0, max_fields=30, max_part_size=4096) as form:
            fields = {k: str(v) for k, v in form.items()}
        if not csrf_ok(request, fields.get("csrf")):
            return await refused(request, "The form's security token or origin does not match this "
                                          "session: reload the page and try again.")
        who = await sessions.admin(request)
        if who is None:
            return await refused(request, "This action needs the admin token: log in first.")
        return fields, who

    async def apply(request: Request) -> Response:
        got = await admin_form(request)
        if isinstance(got, Response):
            return got
        fields, who = got
        try:
            _form, flt = form_filter(fields, action)
            the_plan = _posted_plan(flt, fields, action)
            rate = _rate(fields.get("rate", ""))
            reason = _reason(fields) if action == CANCEL else ""
        except UsageError as exc:
            return await page(request, "message.html", 400, title="Not applied", message=str(exc))
        if (busy := jobs.running()) is not None:
            return await page(request, "message.html", 409, title="A bulk action is running",
                              message=f"Bulk {busy.progress.action} {busy.progress.bulk_id} is "
                                      "still running in this console: abort it or wait for it "
                                      "to end.")
        by, bulk_id = f"console:{who}", uuid.uuid4().hex[:12]
        clock = SystemClock()
        job = Job(BulkProgress(bulk_id=bulk_id, action=action, by=by, filter=flt.describe(),
                               planned=the_plan.matched, rate=rate, started_at=clock.now()))
        jobs.add(job)
        log.info("console: %s starts bulk %s %s of %d rows (%s) at %g rows/s", by, action,
                 bulk_id, the_plan.matched, job.progress.filter, rate,
                 extra={"bulk_id": bulk_id})
        write = write_of(action, stores.outbox, bulk_id=bulk_id, by=by, why=reason, clock=clock)

        async def run() -> None:
            try:
                await apply_bulk(stores.outbox, stores.subs, the_plan, write, bulk_id=bulk_id,
                                 by=by, clock=clock, rate=rate, stop=job.stop,
                                 progress=job.progress)
            except Exception:  # a bug: the progress page and the log say so; the console lives
                job.progress.state, job.progress.error = FAILED_RUN, "an unexpected error: see the log"
                log.exception("console: bulk %s %s", action, bulk_id)

        base = request.scope.get("root_path", "")
        return RedirectResponse(f"{base}/dead-letters/bulk/{bulk_id}", status_code=303,
                                background=BackgroundTask(run))

    async def progress(request: Request) -> Response:
        job = jobs.jobs.get(request.path_params["bulk_id"])
        if job is None:
            return await page(request, "message.html", 404, title="No such bulk replay",
                              message="This console runs no bulk replay by that id (another "
                                      "replica's console may have run it: each row's audit entry "
                                      "names its bulk replay, and the log has its summary).")
        p = job.progress
        return await page(request, "bulk_job.html", p=p, stopping=job.stop.requested,
                          **({"refresh": 2} if p.state == RUNNING else {}))

    async def abort(request: Request) -> Response:
        got = await admin_form(request)
        if isinstance(got, Response):
            return got
        _fields, who = got
        bulk_id = request.path_params["bulk_id"]
        job = jobs.jobs.get(bulk_id)
        if job is None:
            return await page(request, "message.html", 404, title="No such bulk replay",
                              message="This console runs no bulk replay by that id.")
        if job.progress.state == RUNNING and not job.stop.requested:
            job.stop.set()
            log.info("console: console:%s aborts bulk replay %s", who, bulk_id,
                     extra={"bulk_id": bulk_id})
        base = request.scope.get("root_path", "")
        return RedirectResponse(f"{base}/dead-letters/bulk/{bulk_id}", status_code=303)

    routes = [Route(plan_path, plan, methods=["GET"]),
              Route(plan_path + "/apply", apply, methods=["POST"])]
    if action == REPLAY:
        routes += [Route("/dead-letters/bulk/{bulk_id}", progress, methods=["GET"]),
                   Route("/dead-letters/bulk/{bulk_id}/abort", abort, methods=["POST"])]
    return routes


def _posted_plan(flt: BulkFilter, fields: Mapping[str, str], action: str = REPLAY) -> BulkPlan:
    """The plan the operator saw, as its page posted it: how many rows, and the newest one's
    parked time (the apply's bound: a row parked after the plan was read is not the plan's);
    with include_expired, how many of them were claimed with an expired lease and when the plan
    was read (the apply takes only leases ended by then)."""
    matched, newest = fields.get("matched", ""), fields.get("newest", "")
    try:
        count, upto = int(matched), float(newest)
    except ValueError:
        raise UsageError("the plan's row count or bound is missing: open the plan again") from None
    if not 0 < count <= flt.limit or not math.isfinite(upto):
        raise UsageError("the plan's row count or bound is out of range: open the plan again")
    expired, planned_at = 0, time.time()
    if flt.include_expired:
        try:
            expired, planned_at = int(fields.get("expired", "")), float(fields.get("planned_at", ""))
        except ValueError:
            raise UsageError("the plan's claimed rows or time is missing: open the plan again") from None
        if not 0 <= expired <= count or not math.isfinite(planned_at):
            raise UsageError("the plan's claimed rows or time is out of range: open the plan again")
    return BulkPlan(filter=flt, planned_at=planned_at, action=action, matched=count,
                    newest=upto, expired=expired)


def _rate(text: str) -> float:
    try:
        rate = float(text) if text.strip() else DEFAULT_RATE
    except ValueError:
        raise UsageError(f"rate {text!r}: expected rows a second") from None
    if not 0 < rate <= MAX_RATE:
        raise UsageError(f"rate {text!r}: expected rows a second, > 0 and <= {MAX_RATE:g}")
    return rate

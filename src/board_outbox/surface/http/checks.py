"""The checks behind ``/healthz`` and ``/readyz`` (O1, O2), in three kinds:

- **liveness** (``/healthz`` fails, so the orchestrator restarts the process): a loop of the
  service exited, or the worker is stuck in code that ignores its deadline;
- **readiness** (``/readyz`` fails, so the orchestrator holds traffic and rollouts back from this
  replica): this replica cannot serve -- its loops are not running, the store does not answer a
  read in time, or nothing wakes its tail (no change stream and no recent poll pass). The schema
  is in place by construction: ``run`` opens the port only after ``ensure-schema`` succeeded;
- **degraded** (reported by both endpoints, failing neither): what is wrong with some tenants'
  data or with the change stream while this replica keeps serving -- stalled tenants, tenants
  held for a cursor ahead of their counter, the stream closed with events flowing on the poll
  net. Every replica sees the same tenants, so failing readiness on them would take every pod
  out of service at once and hang the rollout of the fix; they go to metrics and alerts instead
  (``board_outbox_tenant_stalled``, ``board_outbox_cursor_ahead``, ``board_outbox_poll_only``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from board_outbox.model.errors import BoardOutboxError

if TYPE_CHECKING:
    from board_outbox.service.runtime import Service

__all__ = ["PROBE_TENANT", "degraded", "liveness", "readiness", "stalled_tenants"]

# a tenant id no one has: the store probe reads one cursor document that is not there
PROBE_TENANT = "\x00readyz-probe"
# tenants named in a probe's body at most (the rest are counted): a body stays small whatever
# the tenant count; /metrics and `status` name them all
SHOWN = 100


def liveness(service: Service) -> dict[str, str]:
    """Failing liveness checks (empty: alive): every loop the service started is still running."""
    if not service.loops:
        return {"loops": "not started"}
    dead = sorted(name for name, alive in service.loops.items() if not alive)
    failing = {"loops": f"exited: {', '.join(dead)}"} if dead else {}
    # every plugin step has a deadline (max_execution_seconds): a worker with rows claimed that
    # has not moved for longer than that plus a lease is stuck in code that ignores cancellation
    w = service.worker.settings
    stuck = service.worker.progress.stuck_for()
    if stuck > w.max_execution_seconds + w.lease_seconds:
        failing["worker"] = (f"no progress for {stuck:.0f}s while rows are claimed (a plugin "
                             "step that ignores its deadline?)")
    return failing


def _wake_allowance(service: Service) -> float:
    """How old the last full poll pass may be: a pass runs every poll interval; a slow one (one
    store op timeout) is allowed on top."""
    return 2 * service.config.tail.poll_interval_seconds + service.config.store.op_timeout_seconds


async def readiness(service: Service) -> tuple[dict[str, str], list[str]]:
    """Failing readiness checks (empty: ready) and, for the body, the stalled tenants (which
    never fail it: see ``degraded``).

    - the liveness checks (``loops``, ``worker``);
    - ``store``: one cursor read answers within the store op timeout;
    - ``wake``: the change stream is open, or the poll net completed a full pass recently."""
    failing = liveness(service)
    timeout = service.config.store.op_timeout_seconds
    try:
        with anyio.fail_after(timeout):
            await service.stores.cursors.get(PROBE_TENANT)
    except TimeoutError:
        failing["store"] = f"no answer within store.op_timeout_seconds ({timeout:g}s)"
    except BoardOutboxError as exc:
        failing["store"] = f"{type(exc).__name__}: {exc}"
    stream = bool(service.loops.get("waker")) and service.stream_open
    fresh = _wake_allowance(service)
    last = service.last_poll_ok
    polling = (bool(service.loops.get("tail")) and last is not None
               and service.clock.now() - last <= fresh)
    if not (stream or polling):
        failing["wake"] = ("change stream not open and no full poll pass completed in the last "
                           f"{fresh:g}s")
    return failing, stalled_tenants(service)


def stalled_tenants(service: Service) -> list[str]:
    """The tenants behind whose cursor has not moved for ``tail.stall_seconds`` (O2)."""
    return sorted(t for t, st in service.status.items() if st.stalled)


def _names(items: list[str]) -> str:
    more = len(items) - SHOWN
    return ", ".join(items[:SHOWN]) + (f" and {more} more" if more > 0 else "")


def degraded(service: Service) -> dict[str, str]:
    """What is wrong while this replica still serves (empty: nothing); never fails a probe.

    - ``tail``: stalled tenants (behind, cursor still for ``tail.stall_seconds``);
    - ``cursor``: tenants held for a cursor ahead of their counter, until ``cursor reset`` (R2);
    - ``stream``: change streams are on but the stream has been closed for longer than the
      wake allowance: events flow on the poll net alone, every poll interval (W3)."""
    out: dict[str, str] = {}
    stalled = stalled_tenants(service)
    if stalled:
        out["tail"] = f"stalled tenants: {_names(stalled)}"
    held = service.tail.cursor_ahead
    if held:
        # draining these would skip events silently; they wait for `cursor reset`
        out["cursor"] = "cursor ahead of its counter (held until `cursor reset`): " + _names(
            [f"{t} ({c} > {h})" for t, (c, h) in sorted(held.items())])
    down = service.stream_down_since
    if bool(service.loops.get("waker")) and down is not None:
        for_ = service.clock.now() - down
        if for_ > _wake_allowance(service):
            out["stream"] = (f"running on the poll net alone for {for_:.0f}s: change stream "
                             f"not open ({service.stream_down_reason})")
    return out

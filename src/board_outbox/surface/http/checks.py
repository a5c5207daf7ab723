"""The checks behind ``/healthz`` and ``/readyz`` (O1, O2)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from board_outbox.model.errors import BoardOutboxError

if TYPE_CHECKING:
    from board_outbox.service.runtime import Service

# a tenant id no one has: the store probe reads one cursor document that is not there
PROBE_TENANT = "\x00readyz-probe"


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


async def readiness(service: Service) -> tuple[dict[str, str], list[str]]:
    """Failing readiness checks (empty: ready) and the stalled tenants.

    - ``store``: one cursor read answers within the store op timeout;
    - ``wake``: the change stream is open, or the poll net completed a full pass recently;
    - ``stream``: with change streams on, the stream has not been closed (the service running on
      the poll net alone) for longer than the ``wake`` allowance;
    - ``cursor``: no tenant is held for a cursor ahead of its counter (R2);
    - ``tail``: no tenant is stalled (behind, cursor still for ``tail.stall_seconds``)."""
    failing = liveness(service)
    timeout = service.config.store.op_timeout_seconds
    try:
        with anyio.fail_after(timeout):
            await service.stores.cursors.get(PROBE_TENANT)
    except TimeoutError:
        failing["store"] = f"no answer within store.op_timeout_seconds ({timeout:g}s)"
    except BoardOutboxError as exc:
        failing["store"] = f"{type(exc).__name__}: {exc}"
    tail = service.config.tail
    stream = bool(service.loops.get("waker")) and service.stream_open
    # a full pass runs every poll interval; allow a slow pass (one op timeout) on top
    fresh = 2 * tail.poll_interval_seconds + timeout
    last = service.last_poll_ok
    polling = (bool(service.loops.get("tail")) and last is not None
               and service.clock.now() - last <= fresh)
    if not (stream or polling):
        failing["wake"] = ("change stream not open and no full poll pass completed in the last "
                           f"{fresh:g}s")
    down = service.stream_down_since
    if bool(service.loops.get("waker")) and down is not None:
        for_ = service.clock.now() - down
        if for_ > fresh:
            # W3: events still flow, on the poll net alone (every poll interval, not at once)
            failing["stream"] = (f"running on the poll net alone for {for_:.0f}s: change stream "
                                 f"not open ({service.stream_down_reason})")
    held = service.tail.cursor_ahead
    if held:
        # R2: draining these would skip events silently; they wait for `cursor reset`
        failing["cursor"] = "cursor ahead of its counter (held until `cursor reset`): " + ", ".join(
            f"{t} ({c} > {h})" for t, (c, h) in sorted(held.items()))
    stalled = sorted(t for t, st in service.status.items() if st.stalled)
    if stalled:
        failing["tail"] = f"stalled tenants: {', '.join(stalled)}"
    return failing, stalled

"""The change-stream waker: the stream's inserts wake their tenants' tails (C1), its documents
feed the tail's buffer, its writes to the subscriptions reset their cache, its
position is saved (S4), it leaves out the tenants other members own and reopens when that
changes (S5), it is read at the pace of a busy tail's passes (S6), and a lost or refused stream
falls back to the poll net and reopens. A part of ``Service`` (``service/runtime.py``), kept
apart from its loops."""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel

from board_outbox.model.errors import ChangeStreamLost, StoreUnavailable
from board_outbox.model.records import Change
from board_outbox.model.validation import OnceLog, cap

if TYPE_CHECKING:
    from board_outbox.engine.flow.membership import Ownership
    from board_outbox.engine.tail.subcache import SubscriptionCache
    from board_outbox.engine.tail.tail import Tail
    from board_outbox.engine.telemetry.metrics import Metrics
    from board_outbox.model.clock import Clock
    from board_outbox.ports import Stores
    from board_outbox.service.config_sections import Config
    from board_outbox.service.resume import ResumePoint
    from board_outbox.service.stats import Stats

log = logging.getLogger("board_outbox.service")

MAX_TOKEN_REFUSALS = 3  # failed opens from one stored resume token before it is dropped


def failure_key(exc: BaseException) -> str:
    """What names a failure once: its type and message, without the server's per-reply
    details (cluster time...), so that a repeat of the same refusal is logged once."""
    return f"{type(exc).__name__}: {str(exc).split(', full error', 1)[0][:300]}"


class StreamWaker:
    """The stream half of ``Service``: the attributes below are the service's own."""

    config: Config
    clock: Clock
    stores: Stores
    tail: Tail
    subscriptions: SubscriptionCache | None
    ownership: Ownership
    resume: ResumePoint
    stats: Stats
    metrics: Metrics
    stream_open: bool
    stream_exclude: frozenset[str]
    stream_excluding: frozenset[str]
    stream_down_since: float | None
    stream_down_reason: str
    _once: OnceLog
    _passes: int  # drain passes begun (the tail loop's)
    _tail_moved: anyio.Event  # set when a drain pass begins or ends
    _tail_wake: anyio.Event
    _read_at_pass: int  # ``_passes`` when the stream's last getMore went out

    @property
    def stopping(self) -> bool:
        raise NotImplementedError

    @property
    def tail_busy(self) -> bool:
        raise NotImplementedError

    def wake_tenant(self, tenant_id: str) -> None:
        raise NotImplementedError

    def request_full_poll(self) -> None:
        raise NotImplementedError

    @property
    def poll_only(self) -> bool:
        """Change streams are on but the stream is not open: events flow on the poll net alone."""
        return self.stream_down_since is not None

    def _stream_state(self, open_: bool, reason: str = "") -> None:
        self.stream_open = open_
        if open_:
            if self.stream_down_since is not None:
                log.info("change stream open: waking on inserts again")
                self._once = OnceLog(log)  # a relapse is logged again
            self.stream_down_since = None
            return
        if self.stream_down_since is None:
            self.stream_down_since = self.clock.now()
            self._tail_wake.set()  # the poll net's interval shortens now
        if reason:
            self.stream_down_reason = cap(reason, 300)

    def _rescope_stream(self) -> None:
        """S5: what the change stream should leave out, from the membership view and the tenants
        the poll net has seen; the waker reopens its stream when it changes."""
        exclude = self.ownership.others(self.tail.seen)
        if exclude != self.stream_exclude:  # a new object only when it changed: the waker
            self.stream_exclude = exclude  # compares by identity, once per change

    def on_change(self, change: Change) -> None:
        """One change the stream delivered: its position is reached; a write to the
        subscriptions empties their cache; an insert is counted
        (``board_outbox_stream_events_total``, before any filtering here) and wakes its tenant
        when this replica owns it."""
        # None: "open", no position yet; a quiet batch's token is saved less often (S4)
        self.resume.reached(change.token, quiet=not (change.tenant_id or change.subscriptions))
        if change.subscriptions:
            self.stats.subscription_changes += 1
            if self.subscriptions is not None:
                self.subscriptions.changed()
            return
        if change.tenant_id:
            self.stats.stream_events += 1
            self.metrics.stream_event()
            streamed = self.tail.streamed
            if self.ownership.owns(change.tenant_id):
                if streamed is not None and change.doc is not None:
                    streamed.offer(change.tenant_id, change.seq, change.doc)
                self.stats.stream_wakes += 1
                self.metrics.wake("stream")
                self.wake_tenant(change.tenant_id)
            elif streamed is not None:
                streamed.forget(change.tenant_id)  # not ours now: its deliveries stop here

    async def pace_stream(self) -> None:
        """S6: awaited by the feed before each getMore. While the tail is busy (a drain pass
        running or due at once, or tenants waiting for room in the worker), what the stream
        delivers now is acted on only at the tail's next pass: the read waits until a pass has
        begun since the last one went out, at most ``tail.stream_pace_seconds``. So a busy
        replica reads its stream about once per pass, not once per write (each getMore the
        server answers costs it a wake and a scan of the new oplog entries, and a backlog's
        tenant is drained when the worker has room, not when its next insert arrives). A
        wake for another tenant comes at most one pass, or ``stream_pace_seconds``, later. A
        tail with nothing to do reads at once."""
        seen = self._read_at_pass
        if self.tail_busy and self._passes == seen and not self.stopping:
            self.stats.stream_paced += 1
            with anyio.move_on_after(self.config.tail.stream_pace_seconds):
                while self.tail_busy and self._passes == seen and not self.stopping:
                    await self._tail_moved.wait()
        self._read_at_pass = self._passes

    async def _waker_loop(self) -> None:
        """Wake tenants from the change stream. The resume token is saved at most every
        ``token_save_seconds`` and on the way out, never per event (S4): a token that lags a
        little only means some inserts wake their tenant twice after a restart.

        S5: the stream leaves out the tenants other members own. When that set changes (a
        membership change, a new tenant) the stream is reopened from the token it has reached
        and, once the new one delivers, one full poll covers the inserts the old stream left
        out that are now ours (the membership change has polled already; this poll covers the
        inserts until the reopen)."""
        feed, resume = self.stores.feed, self.resume
        assert feed is not None
        delay = 0.1
        losses = 0
        refusals = 0  # consecutive failures to open the stream from a stored token
        poll_when_open = False  # after a loss: reconcile once the new stream is really open
        rescoping = False  # the last stream ended for a rescope (reopened from its token)

        try:
            while not self.stopping:
                await anyio.lowlevel.checkpoint()  # yield every iteration: a hot loop stays cancellable
                try:
                    token = await resume.load()
                    exclude = self.stream_exclude
                    opened = False
                    # a rescope reopens from the token reached: nothing is lost between the two
                    # streams, so the subscription cache stays as it is across it
                    keep_cache, rescoping = rescoping and token is not None, False
                    try:
                        watch = feed.watch(token, exclude=exclude, pace=self.pace_stream)
                        async with contextlib.aclosing(watch) as changes:
                            async for change in changes:
                                if not opened:
                                    opened = True
                                    if self.tail.streamed is not None:
                                        # deliveries may be lost between two streams: nothing the
                                        # buffer holds is trusted until a read after this point
                                        self.tail.streamed.clear()
                                    if self.subscriptions is not None and not keep_cache:
                                        # every write from here on is delivered: served from memory
                                        self.subscriptions.opened()
                                if not self.stream_open:
                                    self._stream_state(True)
                                self.stream_excluding = exclude
                                refusals = 0
                                if poll_when_open and change.token is not None:  # really delivering
                                    poll_when_open = False
                                    self.request_full_poll()
                                losses = 0
                                self.on_change(change)
                                await resume.save()
                                delay = 0.1
                                if self.stopping:
                                    break
                                if self.stream_exclude is not exclude:
                                    self.stats.stream_rescopes += 1
                                    poll_when_open = rescoping = True
                                    break
                    finally:
                        if self.subscriptions is not None and not rescoping:
                            self.subscriptions.closed()  # nothing vouches for it now
                except ChangeStreamLost as exc:
                    self._stream_state(False, str(exc))
                    log.warning("change stream lost (%s): dropping the resume token, polling "
                                "reconciles", exc)
                    self.stats.stream_reopens += 1
                    # A full poll picks up whatever the stream missed: one now, and one as soon
                    # as the new stream delivers, for inserts between the loss and the reopen.
                    self.request_full_poll()
                    poll_when_open = True
                    try:
                        await resume.clear()  # the position is dropped even if the store fails
                    except StoreUnavailable as clear_exc:
                        log.warning("could not drop the stale resume token (%s)", clear_exc)
                    losses += 1
                    await anyio.sleep(0 if losses == 1 else delay)  # a repeat loss backs off
                    if losses > 1:
                        delay = min(delay * 2, 5.0)
                except StoreUnavailable as exc:
                    self._stream_state(False, str(exc))
                    log.warning("change stream interrupted (%s): resuming in %.1fs", exc, delay)
                    self.stats.stream_reopens += 1
                    if resume.token is None:
                        # Nothing to resume from: the reopened stream starts at "now", so
                        # whatever was inserted meanwhile is found by a full poll instead.
                        self.request_full_poll()
                        poll_when_open = True
                    await anyio.sleep(delay)
                    delay = min(delay * 2, 5.0)
                except Exception as exc:
                    self._stream_state(False, f"{type(exc).__name__}: {exc}")
                    self._once(("stream", failure_key(exc)), logging.ERROR,
                               "change stream failed (%s: %s): polling carries on, reopening",
                               type(exc).__name__, exc)
                    self.stats.stream_reopens += 1
                    self.request_full_poll()
                    poll_when_open = True
                    if resume.token is not None:
                        refusals += 1
                        if refusals >= MAX_TOKEN_REFUSALS:
                            # W3/R1: a stored token the server refuses (garbage, another
                            # collection's) would keep the stream closed forever: drop it, reopen
                            # at "now"; the full polls above and on reopen cover the gap
                            self._once(("token-dropped", failure_key(exc)), logging.ERROR,
                                       "resume token refused %d times (%s): dropping it, the "
                                       "stream reopens from now and a full poll covers the gap",
                                       refusals, exc)
                            refusals = 0
                            self.stats.tokens_dropped += 1
                            try:
                                await resume.clear()
                            except Exception as clear_exc:
                                log.warning("could not drop the refused resume token (%s)",
                                            clear_exc)
                    await anyio.sleep(delay)
                    delay = min(delay * 2, 5.0)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                await self.save_position()

    async def save_position(self) -> bool:
        """On the way out: save the last token the stream reached, whatever the throttle says
        (S4). True if it wrote; a store error is logged (the next start resumes a little
        earlier: some inserts wake their tenant twice)."""
        try:
            return await self.resume.save(force=True)
        except Exception as exc:
            log.warning("could not save the resume token on the way out (%s)", exc)
            return False

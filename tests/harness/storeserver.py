"""A store server for multi-process tests: one process holds the in-memory backend and serves
every port over loopback TCP, so several replica *processes* share one store (and can be
SIGKILLed mid-call) without a MongoDB server. Test infrastructure: pickle over 127.0.0.1 only.

Wire: 4-byte big-endian length + pickle of (port, method, args, kwargs); reply (ok, value).
"""

from __future__ import annotations

import argparse
import pickle
import struct
import sys
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import SocketStream

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.board import Card
from board_outbox.model.errors import StoreUnavailable
from board_outbox.model.subscriptions import MatchRule, Subscription
from board_outbox.ports import Stores

PORTS = ("events", "cursors", "outbox", "subs", "cards", "labels", "launcher", "readmodels", "admin")


async def _read_frame(stream: SocketStream) -> bytes | None:
    header = b""
    while len(header) < 4:
        try:
            chunk = await stream.receive(4 - len(header))
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return None
        header += chunk
    (n,) = struct.unpack(">I", header)
    buf = bytearray()
    while len(buf) < n:
        buf += await stream.receive(min(65536, n - len(buf)))
    return bytes(buf)


def _frame(obj: Any) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return struct.pack(">I", len(data)) + data


async def setup_board(stores: Stores, tenants: int, cards: int) -> list[str]:
    """Each tenant: two subscriptions (card.created; column review) and ``cards`` cards."""
    names = [f"lt{i:02d}" for i in range(tenants)]
    for t in names:
        await stores.subs.put(Subscription(sub_id=f"{t}.created", tenant_id=t, bot="triage",
                                           rule=MatchRule(event_types=("card.created",))))
        await stores.subs.put(Subscription(sub_id=f"{t}.review", tenant_id=t, bot="review",
                                           rule=MatchRule(column="review")))
        for c in range(cards):
            col = ("inbox", "doing", "review")[c % 3]
            await stores.cards.put(Card(tenant_id=t, card_id=f"c{c}", column=col))
    return names


class Admin:
    """Load-test helpers that run inside the server (setup, bulk emit, the final audit)."""

    def __init__(self, b: MemoryBackend) -> None:
        self.b = b

    async def setup(self, tenants: int, cards: int) -> list[str]:
        return await setup_board(self.b.stores(), tenants, cards)

    async def emit(self, docs: list[tuple[str, str, str, float]]) -> int:
        for tenant, etype, card_id, at in docs:
            seq = self.b.events._counters.get(tenant, 0) + 1
            self.b.events._counters[tenant] = seq
            self.b.events.insert_now({"tenant_id": tenant, "seq": seq, "type": etype,
                                      "card_id": card_id, "at": at})
        return len(docs)

    async def status(self) -> dict[str, Any]:
        counts = await self.b.outbox.count_by_state()
        behind = 0
        for t in list(self.b.events._counters):
            behind += self.b.events._counters[t] - self.b.cursors._cursors.get(t, 0)
        return {"rows": counts, "behind": behind, "launches": len(self.b.launcher.launches)}

    async def audit(self) -> dict[str, Any]:
        from tests.harness.audit import audit

        return await audit(self.b.stores(), list(self.b.events._seqs), self.b.outbox.all_docs(),
                           [req.row_key for req in self.b.launcher.launches])


async def serve(port_file: Path, port: int = 0) -> None:
    b = MemoryBackend()
    stores = b.stores()
    targets: dict[str, Any] = {name: getattr(stores, name) for name in PORTS if name != "admin"}
    targets["admin"] = Admin(b)

    async def handle(stream: SocketStream) -> None:
        async with stream:
            while True:
                frame = await _read_frame(stream)
                if frame is None:
                    return
                port, method, args, kwargs = pickle.loads(frame)
                try:
                    value = await getattr(targets[port], method)(*args, **kwargs)
                    reply = (True, value)
                except Exception as exc:
                    reply = (False, exc)
                try:
                    await stream.send(_frame(reply))
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=port)
    bound = listener.extra(anyio.abc.SocketAttribute.local_port)
    port_file.write_text(str(bound))
    await listener.serve(handle)


class RemotePort:
    """A port whose every async method is a call to the store server."""

    def __init__(self, conn: Connection, port: str) -> None:
        self._conn, self._port = conn, port

    def __getattr__(self, method: str) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            return await self._conn.call(self._port, method, args, kwargs)

        return call


class Connection:
    """A small pool of loopback connections (the drain loop and the worker call concurrently)."""

    def __init__(self, host: str, port: int, size: int = 4) -> None:
        self.host, self.port = host, port
        self._free: list[SocketStream] = []
        self._slots = anyio.Semaphore(size)

    async def call(self, port: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        async with self._slots:
            stream = self._free.pop() if self._free else None
            try:
                if stream is None:
                    stream = await anyio.connect_tcp(self.host, self.port)
                await stream.send(_frame((port, method, args, kwargs)))
                frame = await _read_frame(stream)
            except OSError as exc:
                raise StoreUnavailable(f"store server: {exc}") from None
            if frame is None:
                raise StoreUnavailable("store server closed the connection")
            self._free.append(stream)
        ok, value = pickle.loads(frame)
        if not ok:
            raise value
        return value

    def stores(self) -> Stores:
        r = lambda name: RemotePort(self, name)  # noqa: E731
        return Stores(events=r("events"), cursors=r("cursors"), outbox=r("outbox"), subs=r("subs"),
                      cards=r("cards"), labels=r("labels"), launcher=r("launcher"),
                      readmodels=r("readmodels"))

    def admin(self) -> Any:
        return RemotePort(self, "admin")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port-file", type=Path, required=True)
    args = ap.parse_args()
    anyio.run(serve, args.port_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())

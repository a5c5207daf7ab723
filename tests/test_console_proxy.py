"""The console behind a TLS-terminating reverse proxy (U3), over ASGI: the operator port's own
stack (``guarded``: head limit, forwarded headers, ``Host`` check) around the console, each
request sent from a chosen peer address. A trusted proxy's forwarded scheme, host and client
decide the origin check, the ``Host`` check, the cookie's ``Secure`` flag and the login
throttle; the same headers from any other peer change nothing. An auth proxy's identity header
names the operator in every audit entry. The browser test through a real TLS proxy is in
``test_console_browser.py``."""

from __future__ import annotations

import random
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.board import Card
from board_outbox.model.errors import ConfigError
from board_outbox.model.subscriptions import Subscription
from board_outbox.service.config import load_config
from board_outbox.surface.console import build_console
from board_outbox.surface.console.security import LOGIN_FAILURES, SESSION_COOKIE, client_key
from board_outbox.surface.http.app import build_app
from board_outbox.surface.http.proxies import (
    ProxySettings,
    TrustedProxies,
    parse_address,
    parse_forwarded,
    proxy_settings,
    resolve,
)
from board_outbox.surface.http.server import guarded
from tests.test_console import TOKEN, T, _parked_row, csrf_of

pytestmark = pytest.mark.anyio

PROXY = "10.0.0.2"  # in the trusted network below
STRANGER = "198.51.100.9"  # any other peer: straight to the port, around the proxy
PUBLIC = "console.example.com"
BEHIND = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": PUBLIC,
          "X-Forwarded-For": "203.0.113.7"}
ORIGIN = {"Origin": f"https://{PUBLIC}"}


class Browser:
    """One browser's requests as they reach the port from ``peer`` (a proxy's plain-http leg,
    or a stranger's), each with ``headers``. The session cookie is kept here, not in httpx's
    jar (which would not send a ``Secure`` cookie over that http leg, as a browser does over
    its https one)."""

    def __init__(self, app: Any, peer: str, headers: dict[str, str] | None = None) -> None:
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=(peer, 50000)),
                                      base_url="http://127.0.0.1:9464", timeout=10)
        self.headers = dict(headers or {})
        self.cookie: str | None = None
        self.set_cookie = ""

    async def request(self, method: str, path: str, data: dict[str, str] | None = None,
                      headers: dict[str, str] | None = None) -> httpx.Response:
        sent = {**self.headers, **(headers or {})}
        if self.cookie:
            sent["Cookie"] = f"{SESSION_COOKIE}={self.cookie}"
        r = await self.http.request(method, path, data=data, headers=sent)
        self.http.cookies.clear()
        for line in r.headers.get_list("set-cookie"):
            name, _, rest = line.partition("=")
            if name == SESSION_COOKIE:
                self.set_cookie = line
                value = rest.split(";", 1)[0]
                self.cookie = None if value == "null" else value
        return r

    async def login(self, token: str = TOKEN, who: str = "ana",
                    headers: dict[str, str] | None = None) -> httpx.Response:
        page = await self.request("GET", "/ui/login", headers=headers)
        return await self.request("POST", "/ui/login", headers={**ORIGIN, **(headers or {})},
                                  data={"csrf": csrf_of(page.text), "token": token, "who": who})

    async def aclose(self) -> None:
        await self.http.aclose()


@asynccontextmanager
async def proxied(**ui: Any) -> AsyncIterator[tuple[MemoryBackend, Any, str]]:
    """The console (memory backend, one dead-letter) behind the port's stack; ``PROXY``'s
    network trusted unless ``ui`` says otherwise."""
    backend = MemoryBackend()
    await backend.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b"))
    await backend.board.put(Card(tenant_id=T, card_id="c"))
    key = await _parked_row(backend)
    cfg = load_config(env={}, ui={"admin_token": TOKEN, "trusted_proxies": ["10.0.0.0/24"], **ui},
                      service={"allowed_hosts": [PUBLIC]})
    app = guarded(build_app([], ui=build_console(backend.stores(), cfg)), "127.0.0.1",
                  cfg.service.allowed_hosts, proxy_settings(cfg.ui))
    yield backend, app, key


@asynccontextmanager
async def browser(app: Any, peer: str = PROXY,
                  headers: dict[str, str] | None = None) -> AsyncIterator[Browser]:
    b = Browser(app, peer, BEHIND if headers is None else headers)
    try:
        yield b
    finally:
        await b.aclose()


async def replay(b: Browser, key: str, headers: dict[str, str] | None = None) -> httpx.Response:
    page = await b.request("GET", "/ui/dead-letters")
    return await b.request("POST", "/ui/replay", headers={**ORIGIN, **(headers or {})},
                           data={"csrf": csrf_of(page.text), "key": key})


# --- the request as the proxy forwards it -----------------------------------------------------

async def test_a_login_over_https_through_a_trusted_proxy_works_with_a_secure_cookie() -> None:
    async with proxied() as (backend, app, key), browser(app) as b:
        page = await b.request("GET", "/ui/login")
        assert page.status_code == 200
        assert "; secure" in b.set_cookie.lower()  # the browser met the console over https
        assert (await b.login()).status_code == 303
        assert 'id="mode-admin"' in (await b.request("GET", "/ui/dead-letters")).text
        r = await replay(b, key)
        assert r.status_code == 200 and "Replayed 1 of 1" in r.text
        row = await backend.outbox.get(key)
        assert row is not None and row.state == "pending"
        assert [(a.action, a.by) for a in row.audit] == [("replay", "console:ana")]


async def test_without_the_proxy_in_trusted_proxies_its_https_login_is_refused(
        caplog: pytest.LogCaptureFixture) -> None:
    """What the console did behind every proxy before (its own scheme against an https
    ``Origin``): the headers of a proxy not listed are not believed; the log line names the
    origins and the proxy's address to list."""
    from board_outbox.surface.console import security

    security._REFUSED_ORIGINS.clear()  # one line per pair and process: this test's is new
    async with proxied(trusted_proxies=[]) as (_b, app, _key), browser(app) as b:
        await b.request("GET", "/ui/login")
        assert "secure" not in b.set_cookie.lower()
        r = await b.login()
        assert r.status_code == 403 and "origin does not match" in r.text
    [line] = [r.getMessage() for r in caplog.records if "refused a POST from origin" in r.getMessage()]
    assert f"'https://{PUBLIC}'" in line and "'http://127.0.0.1:9464'" in line
    assert f"proxy at {PROXY}, list that address in [ui] trusted_proxies" in line


async def test_the_proxy_may_pass_the_public_host_as_host_instead() -> None:
    """nginx's usual ``proxy_set_header Host $host``: no ``X-Forwarded-Host``; the default port
    in one of ``Host`` and ``Origin`` and not in the other is the same origin."""
    headers = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7",
               "Host": f"{PUBLIC}:443"}
    async with proxied() as (_b, app, _key), browser(app, headers=headers) as b:
        assert (await b.login()).status_code == 303


async def test_a_chain_of_trusted_proxies_is_walked_to_the_client() -> None:
    """A load balancer (10.0.0.3) in front of the proxy (10.0.0.2): the client is the first
    address from the right that is not a trusted proxy."""
    s = ProxySettings(TrustedProxies(["10.0.0.0/24"]))
    got = resolve(ip("10.0.0.2"), [(b"x-forwarded-for", b"203.0.113.7, 10.0.0.3"),
                                   (b"x-forwarded-proto", b"https")], s)
    assert got is not None and (got.client, got.scheme) == ("203.0.113.7", "https")
    # each hop appended its own scheme: the client's is the one the first proxy recorded
    got = resolve(ip("10.0.0.2"), [(b"x-forwarded-for", b"203.0.113.7, 10.0.0.3"),
                                   (b"x-forwarded-proto", b"https, http")], s)
    assert got is not None and got.scheme == "https"
    # a list of schemes that does not reach the client's hop is not believed
    got = resolve(ip("10.0.0.2"), [(b"x-forwarded-for", b"203.0.113.7, 10.0.0.3, 10.0.0.4"),
                                   (b"x-forwarded-proto", b"https, http")], s)
    assert got is not None and got.scheme is None


# --- the hostile cases --------------------------------------------------------------------------

async def test_forged_forwarded_headers_from_an_untrusted_peer_change_nothing() -> None:
    headers = {**BEHIND, "Host": PUBLIC, "Forwarded": f"for=1.2.3.4;proto=https;host={PUBLIC}"}
    async with proxied(proxy_headers="forwarded") as (backend, app, key):
        async with browser(app, STRANGER, headers) as b:
            await b.request("GET", "/ui/login")
            assert "secure" not in b.set_cookie.lower()  # the forged https is not believed
            r = await b.login()
            assert r.status_code == 403 and "origin does not match" in r.text
        # its own origin (plain http to the public name) logs in: the headers were ignored,
        # not the stranger
        async with browser(app, STRANGER, headers) as b:
            assert (await b.login(headers={"Origin": f"http://{PUBLIC}"})).status_code == 303
        assert (await backend.outbox.get(key)).state == "failed"  # type: ignore[union-attr]


async def test_the_host_check_reads_the_forwarded_host_of_a_trusted_proxy_only() -> None:
    async with proxied() as (_b, app, _key):
        async with browser(app, headers={**BEHIND, "X-Forwarded-Host": "evil.example"}) as b:
            r = await b.request("GET", "/ui/")
            assert r.status_code == 400 and "allowed_hosts" in r.text  # DNS rebinding, proxied
        async with browser(app, STRANGER, {**BEHIND, "Host": "evil.example",
                                           "X-Forwarded-Host": PUBLIC}) as b:
            assert (await b.request("GET", "/ui/")).status_code == 400
        async with browser(app, STRANGER, {"X-Forwarded-Host": "evil.example"}) as b:
            assert (await b.request("GET", "/ui/")).status_code == 200  # its own Host decides


async def wrong_tokens(b: Browser, n: int, headers: Any = None) -> list[int]:
    """``n`` logins with a wrong token; ``headers``: per attempt (a callable of its index)."""
    out = []
    for i in range(n):
        h = headers(i) if callable(headers) else headers
        out.append((await b.login(token="x" * 20, headers=h)).status_code)
    return out


async def test_the_login_throttle_counts_each_forwarded_client_apart() -> None:
    async with proxied() as (_b, app, _key):
        async with browser(app) as a:
            assert await wrong_tokens(a, LOGIN_FAILURES) == [403] * LOGIN_FAILURES
            late = await a.login()
            assert late.status_code == 429 and int(late.headers["Retry-After"]) >= 1
        # another operator behind the same proxy is not held back by the first one's mistakes
        async with browser(app, headers={**BEHIND, "X-Forwarded-For": "203.0.113.8"}) as other:
            assert (await other.login()).status_code == 303


async def test_a_forged_x_forwarded_for_does_not_dodge_the_throttle() -> None:
    """A stranger sending a fresh ``X-Forwarded-For`` each attempt is counted by its own
    address; through the proxy, spoofed entries left of the proxy's own are never read."""
    fresh = lambda i: {"X-Forwarded-For": f"192.0.2.{i + 1}"}  # noqa: E731
    async with proxied() as (_b, app, _key):
        async with browser(app, STRANGER, {}) as s:
            own = {"Origin": "http://127.0.0.1:9464"}
            codes = await wrong_tokens(s, LOGIN_FAILURES, lambda i: {**fresh(i), **own})
            assert codes == [403] * LOGIN_FAILURES
            assert (await s.login(headers={**fresh(99), **own})).status_code == 429
        async with browser(app) as b:  # through the proxy: the client prepends, the proxy appends
            spoofed = lambda i: {"X-Forwarded-For": f"192.0.2.{i + 1}, 10.0.0.{i + 9}, 203.0.113.66"}  # noqa: E731
            assert await wrong_tokens(b, LOGIN_FAILURES, spoofed) == [403] * LOGIN_FAILURES
            assert (await b.login(headers=spoofed(99))).status_code == 429


async def test_malformed_forwarded_values_neither_pick_nor_mint_a_client() -> None:
    """RFC 7239 mode. The client's own (malformed) elements, left of the proxy's, are never
    read; an element the walk reaches that does not parse stands for the proxy that wrote it
    (no fresh throttle bucket per guess), and its scheme is not believed."""
    public = f'proto=https;host="{PUBLIC}"'
    async with proxied(proxy_headers="forwarded") as (_b, app, _key), browser(app, headers={}) as b:
        junk = ['for=1.2.3.4;for=5.6.7.8', 'for=', 'for=a b', ';;=;', 'for=%', 'FOR=_hidden',
                'for="[::1"', 'for=unknown', 'x' * 300]
        codes = await wrong_tokens(b, LOGIN_FAILURES, lambda i: {
            "Forwarded": f"{junk[i]}, for=203.0.113.70;{public}"})
        assert codes == [403] * LOGIN_FAILURES
        late = await b.login(headers={"Forwarded": f"{junk[-1]}, for=203.0.113.70;{public}"})
        assert late.status_code == 429
        # the element the proxy wrote does not parse (a parameter twice; or swallowed by the
        # client's unclosed quote): the proxy stands for the client, and the scheme is unknown
        # (http): an https origin does not match
        for bad in (f'for=203.0.113.71;{public};proto=http', f'for="\\", for=203.0.113.71;{public}'):
            r = await b.login(headers={"Forwarded": bad})
            assert r.status_code == 403 and "origin does not match" in r.text, bad
        # a quoted IPv6 client with its port: the /64 is one client to the throttle
        v6 = lambda i: {"Forwarded": f'for="[2001:db8:cafe::{i + 1:x}]:4711";{public}'}  # noqa: E731
        assert await wrong_tokens(b, LOGIN_FAILURES, v6) == [403] * LOGIN_FAILURES
        assert (await b.login(headers=v6(77))).status_code == 429
        ok = await b.login(headers={"Forwarded": f'for="[2001:db8:beef::1]";{public}'})
        assert ok.status_code == 303


@pytest.mark.parametrize(("headers", "client", "scheme", "host"), [
    # spoofed leftmost entries: the walk stops at the first untrusted address from the right
    ([(b"x-forwarded-for", b"6.6.6.6, 203.0.113.7")], "203.0.113.7", None, None),
    # the client's own X-Forwarded-For line before the proxy's: still read from the right
    ([(b"x-forwarded-for", b"6.6.6.6"), (b"x-forwarded-for", b"203.0.113.7")], "203.0.113.7",
     None, None),
    # garbage, an empty entry, a port, a bracketed IPv6, an IPv4-mapped one
    ([(b"x-forwarded-for", b"203.0.113.7, <script>")], PROXY, None, None),
    ([(b"x-forwarded-for", b"203.0.113.7,,")], PROXY, None, None),
    ([(b"x-forwarded-for", b"203.0.113.7:5555")], "203.0.113.7", None, None),
    ([(b"x-forwarded-for", b"[2001:db8::7]:5555")], "2001:db8::7", None, None),
    ([(b"x-forwarded-for", b"::ffff:203.0.113.7")], "203.0.113.7", None, None),
    # a scheme or host that is not one is ignored
    ([(b"x-forwarded-proto", b"javascript")], PROXY, None, None),
    ([(b"x-forwarded-proto", b"HTTPS")], PROXY, "https", None),
    ([(b"x-forwarded-host", b"evil.example/path")], PROXY, None, None),
    ([(b"x-forwarded-host", b"a b")], PROXY, None, None),
    ([(b"x-forwarded-host", PUBLIC.encode() + b":8443")], PROXY, None, PUBLIC + ":8443"),
    # a list longer than any real chain is not believed
    ([(b"x-forwarded-for", b", ".join([b"10.0.0.9"] * 65 + [b"203.0.113.7"]))], PROXY, None,
     None),
    # the other family is ignored (a proxy that does not write it passes the client's copy)
    ([(b"forwarded", b"for=6.6.6.6;proto=https")], PROXY, None, None),
])
def test_hostile_x_forwarded_headers_resolve_to_what_the_proxy_said(
        headers: list[tuple[bytes, bytes]], client: str, scheme: str | None,
        host: str | None) -> None:
    got = resolve(ip(PROXY), headers, ProxySettings(TrustedProxies(["10.0.0.0/24"])))
    seen = (got.client, got.scheme, got.host) if got is not None else (PROXY, None, None)
    assert seen == (client, scheme, host)


def test_forwarded_elements_parse_by_rfc_7239_and_bad_ones_alone_are_dropped() -> None:
    got = parse_forwarded(['for="_gazonk", For="[2001:db8:cafe::17]:4711"',
                           'for=192.0.2.60;proto=http;by=203.0.113.43, for="a,b;c=\\"d\\""',
                           'for=1.2.3.4;for=5.6.7.8, for=a b, for="open, for=9.9.9.9'])
    assert got == [{"for": "_gazonk"}, {"for": "[2001:db8:cafe::17]:4711"},
                   {"for": "192.0.2.60", "proto": "http", "by": "203.0.113.43"},
                   {"for": 'a,b;c="d"'}, None, None, None]
    assert parse_forwarded(["", " ; "]) == [{}, {}]


def test_addresses_in_entries() -> None:
    assert parse_address("192.0.2.7:80") == ip("192.0.2.7")
    assert parse_address("[2001:db8::1]:4711") == ip("2001:db8::1")
    assert parse_address("2001:db8::1") == ip("2001:db8::1")
    for bad in ("unknown", "_hidden", "[2001:db8::1]x", "192.0.2.7:http", "1.2.3", "", "[::1"):
        assert parse_address(bad) is None, bad
    assert client_key("2001:db8:cafe::17") == client_key("2001:db8:cafe::ff") == "2001:db8:cafe::/64"
    assert client_key("203.0.113.7") == "203.0.113.7"


# --- the operator's name from an auth proxy -------------------------------------------------------

async def test_the_auth_proxys_name_is_in_every_audit_entry_and_binds_the_session() -> None:
    named = {**BEHIND, "X-Forwarded-User": "alice@example.com"}
    async with proxied(identity_header="X-Forwarded-User") as (backend, app, key), \
            browser(app, headers=named) as b:
        page = await b.request("GET", "/ui/login")
        assert "You are <strong>alice@example.com</strong>" in page.text and 'id="who"' not in page.text
        assert (await b.login(who="mallory")).status_code == 303  # the form's name is not asked
        assert (await replay(b, key)).status_code == 200
        row = await backend.outbox.get(key)
        assert row is not None and [a.by for a in row.audit] == ["console:alice@example.com"]
        tenant = await b.request("GET", f"/ui/tenants/{T}")
        form = {"csrf": csrf_of(tenant.text), "scope": "tenant", "key": T, "reason": "r"}
        assert (await b.request("POST", "/ui/pauses/pause", form, ORIGIN)).status_code == 303
        [p] = await backend.pauses.all()
        assert p.by == "console:alice@example.com"

        # the same cookie with another name from the proxy, or around the proxy: not admin
        for peer, headers in ((PROXY, {**BEHIND, "X-Forwarded-User": "bob@example.com"}),
                              (PROXY, BEHIND),
                              (STRANGER, {**named, "Host": PUBLIC})):
            other = Browser(app, peer, headers)
            other.cookie = b.cookie
            try:
                assert 'id="mode-admin"' not in (await other.request("GET", "/ui/pauses")).text
                r = await other.request("POST", "/ui/pauses/resume", form,
                                        ORIGIN if peer == PROXY else {"Origin": f"http://{PUBLIC}"})
                assert r.status_code == 403 and "log in" in r.text, (peer, headers)
            finally:
                await other.aclose()
        assert [q.active for q in await backend.pauses.all()] == [True]


async def test_a_login_without_a_name_from_a_trusted_proxy_is_refused() -> None:
    async with proxied(identity_header="X-Auth-Request-Email") as (_b, app, _key):
        for peer, headers in ((PROXY, BEHIND),  # the proxy sent none
                              (STRANGER, {"X-Auth-Request-Email": "alice@example.com"}),
                              (PROXY, {**BEHIND, "X-Auth-Request-Email": "\x07bell"}),
                              (PROXY, {**BEHIND, "X-Auth-Request-Email": "a" * 129})):
            async with browser(app, peer, headers) as b:
                origin = ORIGIN if peer == PROXY else {"Origin": "http://127.0.0.1:9464"}
                r = await b.login(headers=origin)
                assert r.status_code == 403 and "X-Auth-Request-Email" in r.text, (peer, headers)
        # the header twice (the client's copy passed through beside the proxy's): no name
        async with browser(app) as b:
            page = await b.request("GET", "/ui/login")
            r = await b.http.post("/ui/login", headers=httpx.Headers([
                *BEHIND.items(), *ORIGIN.items(), ("Cookie", f"{SESSION_COOKIE}={b.cookie}"),
                ("X-Auth-Request-Email", "alice@example.com"),
                ("X-Auth-Request-Email", "mallory@example.com")]),
                data={"csrf": csrf_of(page.text), "token": TOKEN})
            assert r.status_code == 403 and "more than once" in r.text


# --- the settings ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("ui", "match"), [
    ({"trusted_proxies": ["10.0.0.300"]}, r"ui\.trusted_proxies: '10\.0\.0\.300'"),
    ({"trusted_proxies": ["10.0.0.5/8"]}, r"ui\.trusted_proxies: .*host bits set"),
    ({"trusted_proxies": ["*"]}, r"ui\.trusted_proxies"),
    ({"identity_header": "X-Forwarded-User"}, r"ui\.identity_header: .*ui\.trusted_proxies"),
    ({"identity_header": "X Forwarded User", "trusted_proxies": ["10.0.0.2"]},
     r"ui\.identity_header"),
    ({"identity_header": "Cookie", "trusted_proxies": ["10.0.0.2"]}, r"ui\.identity_header"),
    ({"proxy_headers": "both"}, r"ui\.proxy_headers"),
])
def test_bad_proxy_settings_are_one_line_errors(ui: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match) as err:
        load_config(env={}, ui=ui)
    assert "\n" not in str(err.value)


def test_good_proxy_settings_are_accepted() -> None:
    cfg = load_config(env={}, ui={"trusted_proxies": ["10.0.0.2", "10.1.0.0/16", "fd00::/8"],
                                  "proxy_headers": "forwarded",
                                  "identity_header": "X-Auth-Request-Email"})
    s = proxy_settings(cfg.ui)
    assert "10.1.200.3" in s.trusted and "fd00::1" in s.trusted and "10.2.0.1" not in s.trusted
    assert "::ffff:10.0.0.2" in s.trusted and "not an address" not in s.trusted
    assert (s.headers, s.identity_header) == ("forwarded", "x-auth-request-email")


def ip(text: str) -> Any:
    got = parse_address(text)
    assert got is not None
    return got


def test_random_headers_never_raise() -> None:
    """Fuzz: any bytes in the forwarded headers resolve (or do not) without an exception."""
    rng = random.Random(7)
    alphabet = b'0123456789abcdef.:[]" ;,=\\\t_-forwadphst\x00\xff'
    settings = [ProxySettings(TrustedProxies(["10.0.0.0/8", "::/0"]), mode)
                for mode in ("x-forwarded", "forwarded")]
    for _ in range(3000):
        value = bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
        name = rng.choice([b"forwarded", b"x-forwarded-for", b"x-forwarded-proto",
                           b"x-forwarded-host"])
        for s in settings:
            got = resolve(ip("10.0.0.2"), [(name, value)], s)
            assert got is None or re.fullmatch(r"[0-9a-f.:]+", got.client), (value, got)

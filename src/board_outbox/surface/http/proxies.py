"""Requests that reach the operator port (or ``board-outbox console``) through a reverse proxy
(U3): ``ProxyHeaders`` is ASGI middleware that, for a request whose peer is one of
``[ui] trusted_proxies``, replaces the request's client address, scheme and ``Host`` with what
the proxies recorded, and carries the operator's name from an auth proxy
(``[ui] identity_header``). A request from any other peer keeps its own: a forged header
changes nothing.

Which header the proxies write is a setting (``[ui] proxy_headers``), never a guess:
``x-forwarded`` reads ``X-Forwarded-For``, ``-Proto`` and ``-Host``; ``forwarded`` reads
RFC 7239's ``Forwarded``. The other family is ignored, since a proxy that does not write a
header usually passes the client's own copy of it through untouched.

The client is found as RFC 7239 (section 8.1) describes, from the right: the nearest entry was
written by the peer, a trusted proxy; while the entry it names is itself a trusted proxy, that
proxy wrote the entry to its left; the first address that is not trusted is the client.
Entries further left were written by the client (or by proxies it chose) and are never read.
An entry the walk reaches that is not an address (``unknown``, an obfuscated name, or
malformed) ends the walk at the trusted proxy that reported it: its address stands for the
client, so a made-up entry can neither pick a client nor mint a fresh one (the login throttle
counts per client). The scheme and host are the ones the proxy that met the client recorded;
a value that is not ``http``/``https`` or not a host name is ignored, as is a ``Forwarded``
element that does not parse.

The parsing is our own. The libraries at hand do not fit: hypercorn's ``ProxyFixMiddleware``
trusts every peer (a hop count, no set of addresses) and splits ``Forwarded`` on ``;``
without its quoted strings; uvicorn's middleware has a trusted set but reads neither
``Forwarded`` nor ``X-Forwarded-Host``; aiohttp parses ``Forwarded`` only as a property of its
own request object."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from starlette.types import ASGIApp, Receive, Scope, Send

if TYPE_CHECKING:
    from board_outbox.service.config_sections import UiConfig

__all__ = ["VIA", "Forwarding", "ProxyHeaders", "ProxySettings", "TrustedProxies", "Via",
           "parse_address", "parse_forwarded", "proxy_settings", "resolve", "via"]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
HeaderList = Sequence[tuple[bytes, bytes]]

VIA = "board_outbox.via"  # the scope key ``ProxyHeaders`` fills (read it with ``via``)
MAX_IDENTITY = 128  # characters of an operator's name from the auth proxy
MAX_ENTRIES = 64  # list entries read per header; a longer chain is not one proxies wrote

# RFC 7230 token and quoted-string (obs-text: the latin-1 upper half), RFC 7239 section 4
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_QUOTED = r'"(?:[\t !#-\[\]-~\x80-\xff]|\\[\t -~\x80-\xff])*"'
_PAIR = re.compile(rf"({_TOKEN})=({_TOKEN}|{_QUOTED})")
_ELEMENT = re.compile(rf"[ \t]*(?:{_PAIR.pattern})?(?:[ \t]*;[ \t]*(?:{_PAIR.pattern})?)*[ \t]*")
_UNQUOTE = re.compile(r"\\(.)")
_HOST = re.compile(r"(?:\[[0-9A-Fa-f:.]{2,45}\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)"
                   r"(?::[0-9]{1,5})?")
_PORT = re.compile(r"[0-9]{1,5}|_[A-Za-z0-9._-]+")


def parse_address(text: str) -> Address | None:
    """The IP address in a proxy's entry: ``192.0.2.7``, ``192.0.2.7:4711``, ``2001:db8::1``,
    ``[2001:db8::1]:4711`` (an IPv4-mapped IPv6 address as its IPv4 one); None for anything
    else (``unknown``, an obfuscated ``_name``, garbage)."""
    text = text.strip()
    port = ""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        text, rest = text[1:end], text[end + 1:]
        if rest:
            if not rest.startswith(":"):
                return None
            port = rest[1:]
    elif text.count(":") == 1:
        text, port = text.split(":")
    if port and not _PORT.fullmatch(port):
        return None
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


class TrustedProxies:
    """The addresses and networks (``10.0.0.2``, ``10.0.0.0/8``, ``fd00::/8``) whose forwarded
    headers are believed."""

    def __init__(self, entries: Iterable[str] = ()) -> None:
        self.networks: tuple[Network, ...] = tuple(
            ipaddress.ip_network(e.strip(), strict=True) for e in entries)

    def __bool__(self) -> bool:
        return bool(self.networks)

    def __contains__(self, addr: object) -> bool:
        if isinstance(addr, str):
            addr = parse_address(addr)
        if not isinstance(addr, ipaddress.IPv4Address | ipaddress.IPv6Address):
            return False
        return any(addr.version == n.version and addr in n for n in self.networks)


def network_problem(entry: str) -> str | None:
    """Why ``entry`` cannot be a trusted proxy (None: it can): for the configuration's check."""
    try:
        ipaddress.ip_network(entry.strip(), strict=True)
    except ValueError as exc:
        return str(exc)
    return None


def parse_forwarded(values: Iterable[str]) -> list[dict[str, str] | None]:
    """The elements of ``Forwarded`` header values (RFC 7239), left to right: each a dict of its
    parameters (names lower case, quoted strings unquoted), or None for an element that does
    not parse (a stray character, an unclosed quote, a parameter given twice). Commas inside a
    quoted string do not split; an unclosed quote makes the rest one element."""
    out: list[dict[str, str] | None] = []
    for value in values:
        for raw in _split_elements(value):
            if not _ELEMENT.fullmatch(raw):
                out.append(None)
                continue
            elem: dict[str, str] | None = {}
            for m in _PAIR.finditer(raw):
                name, v = m.group(1).lower(), m.group(2)
                if v.startswith('"'):
                    v = _UNQUOTE.sub(r"\1", v[1:-1])
                if elem is None or name in elem:
                    elem = None  # each parameter at most once per element (RFC 7239, 4)
                    break
                elem[name] = v
            out.append(elem)
    return out


def _split_elements(value: str) -> list[str]:
    parts, start, quoted, escaped = [], 0, False, False
    for i, c in enumerate(value):
        if escaped:
            escaped = False
        elif quoted and c == "\\":
            escaped = True
        elif c == '"':
            quoted = not quoted
        elif c == "," and not quoted:
            parts.append(value[start:i])
            start = i + 1
    parts.append(value[start:])
    return parts


@dataclass(frozen=True)
class Via:
    """How a request reached the app: the socket's peer, whether it is a trusted proxy, and
    the operator's name from the auth proxy (only from a trusted one) or why there is none."""

    peer: str | None = None
    trusted: bool = False
    identity: str | None = None
    identity_problem: str = ""


def via(scope: Scope) -> Via:
    """The request's ``Via`` (a request that did not pass ``ProxyHeaders``: its own peer,
    untrusted, no name)."""
    found = scope.get(VIA)
    if isinstance(found, Via):
        return found
    client = scope.get("client")
    return Via(peer=client[0] if client else None)


@dataclass(frozen=True)
class ProxySettings:
    trusted: TrustedProxies = field(default_factory=TrustedProxies)
    headers: Literal["x-forwarded", "forwarded"] = "x-forwarded"
    identity_header: str = ""  # empty: no operator names from the proxy


def proxy_settings(ui: UiConfig) -> ProxySettings:
    return ProxySettings(TrustedProxies(ui.trusted_proxies), ui.proxy_headers,
                         ui.identity_header.strip().lower())


@dataclass(frozen=True)
class Forwarding:
    """What the trusted proxies said of a request: the client's address, and the scheme and
    host it asked for (None: keep the request's own)."""

    client: str
    scheme: str | None = None
    host: str | None = None


def _values(headers: HeaderList, name: bytes) -> list[str]:
    """A list header's entries across all its lines, in order (at most ``MAX_ENTRIES``: a
    longer list is treated as none at all)."""
    out: list[str] = []
    for k, v in headers:
        if k.lower() == name:
            out.extend(p.strip() for p in v.decode("latin-1").split(","))
    return out if len(out) <= MAX_ENTRIES else []


def _lines(headers: HeaderList, name: bytes) -> list[str]:
    return [v.decode("latin-1") for k, v in headers if k.lower() == name]


def _scheme(value: str | None) -> str | None:
    v = (value or "").strip().lower()
    return v if v in ("http", "https") else None


def _host(value: str | None) -> str | None:
    v = (value or "").strip()
    return v if v and len(v) <= 255 and _HOST.fullmatch(v) else None


def resolve(peer: Address, headers: HeaderList, settings: ProxySettings) -> Forwarding | None:
    """What the proxies in front of the trusted ``peer`` said (None: nothing, or nothing
    usable: the request keeps its own client, scheme and host)."""
    if settings.headers == "forwarded":
        return _resolve_forwarded(peer, headers, settings.trusted)
    return _resolve_x_forwarded(peer, headers, settings.trusted)


def _resolve_x_forwarded(peer: Address, headers: HeaderList,
                         trusted: TrustedProxies) -> Forwarding | None:
    chain = _values(headers, b"x-forwarded-for")
    protos = _values(headers, b"x-forwarded-proto")
    hosts = _values(headers, b"x-forwarded-host")
    if not (chain or protos or hosts):
        return None
    client: Address = peer
    hop = 0  # entries from the right: the one written by the proxy that met the client
    while hop < len(chain):
        addr = parse_address(chain[-1 - hop])
        if addr is None:
            break  # the proxy that reported it stands for the client
        client = addr
        if addr not in trusted or hop == len(chain) - 1:
            break
        hop += 1

    def at_hop(values: list[str]) -> str | None:
        # a single value stands for every hop (a proxy that sets, not appends, the header)
        if len(values) == 1:
            return values[0]
        return values[-1 - hop] if hop < len(values) else None

    return Forwarding(client=str(client), scheme=_scheme(at_hop(protos)), host=_host(at_hop(hosts)))


def _resolve_forwarded(peer: Address, headers: HeaderList,
                       trusted: TrustedProxies) -> Forwarding | None:
    lines = _lines(headers, b"forwarded")
    if not lines:
        return None
    elements = parse_forwarded(lines)
    if len(elements) > MAX_ENTRIES:
        return None
    client: Address = peer
    found: dict[str, str] | None = None
    for elem in reversed(elements):
        if elem is None:  # unreadable: the proxy that wrote it stands for the client, and
            found = None  # what it said of the scheme and host is not known
            break
        found = elem
        addr = parse_address(elem.get("for", ""))
        if addr is None:
            break
        client = addr
        if addr not in trusted:
            break
    if found is None:
        return Forwarding(client=str(client))
    return Forwarding(client=str(client), scheme=_scheme(found.get("proto")),
                      host=_host(found.get("host")))


def _identity(headers: HeaderList, name: bytes) -> tuple[str | None, str]:
    """The operator's name in the identity header, or why there is none."""
    lines = [v for k, v in headers if k.lower() == name]
    if not lines:
        return None, "no such header came with the request"
    if len(lines) > 1:
        return None, "it came more than once"
    try:
        text = lines[0].decode("utf-8").strip()
    except UnicodeDecodeError:
        return None, "it is not UTF-8"
    if not text:
        return None, "it is empty"
    if len(text) > MAX_IDENTITY or not text.isprintable():
        return None, f"it is not a name (printable, at most {MAX_IDENTITY} characters)"
    return text, ""


class ProxyHeaders:
    """ASGI middleware (see the module's docstring): place it outside every check that reads
    the client, the scheme or ``Host``. The identity header is removed from every request, and
    the request's ``Via`` is left in the scope (``via``)."""

    def __init__(self, app: ASGIApp, settings: ProxySettings) -> None:
        self.app, self.settings = app, settings
        self.identity = settings.identity_header.encode("latin-1")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not (self.settings.trusted or self.identity):
            await self.app(scope, receive, send)  # nothing to believe: ``via`` reads the peer
            return
        headers: list[tuple[bytes, bytes]] = list(scope.get("headers", ()))
        client = scope.get("client")
        peer = parse_address(client[0]) if client else None
        trusted = peer is not None and peer in self.settings.trusted
        identity, problem = None, "the request did not come through a trusted proxy"
        if self.identity:
            if trusted:
                identity, problem = _identity(headers, self.identity)
            headers = [(k, v) for k, v in headers if k.lower() != self.identity]
        scope = {**scope, "headers": headers,
                 VIA: Via(peer=client[0] if client else None, trusted=trusted,
                          identity=identity, identity_problem="" if identity else problem)}
        if trusted and peer is not None:
            got = resolve(peer, headers, self.settings)
            if got is not None:
                scope["client"] = (got.client, 0)
                if got.scheme is not None:
                    scope["scheme"] = got.scheme
                if got.host is not None:
                    scope["headers"] = [(k, v) for k, v in headers if k != b"host"] + [
                        (b"host", got.host.encode("latin-1"))]
        await self.app(scope, receive, send)

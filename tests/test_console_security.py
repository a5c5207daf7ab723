"""The console's sessions and requests an operator can trust (issues 30, 32): a logout ends the
session on the server (a copied cookie is worth nothing afterwards), a session counts as admin
only while it is open in the store under the current token, logins are throttled per client, the
admin token has real entropy, and POSTs come from the console itself (``Sec-Fetch-Site``
``same-origin``, an ``Origin`` equal to the console's)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from base64 import b64encode
from pathlib import Path

import httpx
import itsdangerous
import pytest

from board_outbox.model.errors import ConfigError
from board_outbox.service.config import load_config
from board_outbox.surface.console.security import SESSION_COOKIE, session_secret
from tests.test_console import TOKEN, console, csrf_of, login, origin

pytestmark = pytest.mark.anyio


def forged_cookie(secret: str, data: dict[str, object]) -> str:
    """A session cookie as starlette's SessionMiddleware signs it, with ``data`` inside: what a
    holder of the signing key (or of an old cookie) could present."""
    signed = itsdangerous.TimestampSigner(secret).sign(b64encode(json.dumps(data).encode()))
    return signed.decode()


async def is_admin(client: httpx.AsyncClient, key: str) -> bool:
    """Whether the client's session may replay: the page shows the selection, and a confirm POST
    with its own CSRF token is accepted."""
    page = await client.get("/ui/dead-letters")
    shown = 'id="mode-admin"' in page.text
    confirm = await client.post("/ui/replay/confirm", data={"csrf": csrf_of(page.text), "key": key},
                                headers=origin(client))
    assert shown == (confirm.status_code == 200), (shown, confirm.status_code)
    return shown


async def test_logout_ends_the_session_on_the_server_and_a_copied_cookie_is_refused() -> None:
    async with console(admin_token=TOKEN) as (_backend, client, key):
        assert (await login(client)).status_code == 303
        assert await is_admin(client, key)
        copied = client.cookies[SESSION_COOKIE]
        token = csrf_of((await client.get("/ui/")).text)
        out = await client.post("/ui/logout", data={"csrf": token}, headers=origin(client))
        assert out.status_code == 303
        assert not await is_admin(client, key)
        async with httpx.AsyncClient(base_url=client.base_url, timeout=10,
                                     cookies={SESSION_COOKIE: copied}) as thief:
            assert not await is_admin(thief, key)


async def test_a_session_is_admin_only_while_open_under_the_current_token() -> None:
    """A signed cookie that says ``admin`` (or names a session opened with another token) is
    not admin: only a session open in the store with the current token's tag is."""
    from board_outbox.model.records import ConsoleSession
    from board_outbox.surface.console.security import _stored_id, token_tag

    async with console(admin_token=TOKEN) as (backend, client, key):
        secret = session_secret(TOKEN)
        csrf = "c" * 43
        old_sid, open_sid = "o" * 43, "p" * 43
        await backend.sessions.open(ConsoleSession(
            session_id=_stored_id(old_sid), token_tag=token_tag("the-token-before-this-one"),
            who="former", expires_at=time.time() + 3600))
        await backend.sessions.open(ConsoleSession(
            session_id=_stored_id(open_sid), token_tag=token_tag(TOKEN), who="ana",
            expires_at=time.time() + 3600))
        for data in ({"admin": token_tag(TOKEN), "who": "mallory", "csrf": csrf},
                     {"admin": "yes", "sid": "n" * 43, "csrf": csrf},
                     {"sid": old_sid, "csrf": csrf}):
            cookie = forged_cookie(secret, data)
            async with httpx.AsyncClient(base_url=client.base_url, timeout=10,
                                         cookies={SESSION_COOKIE: cookie}) as other:
                assert not await is_admin(other, key), data
        # the control: the same forgery naming the session open under this token is admin
        async with httpx.AsyncClient(base_url=client.base_url, timeout=10, cookies={
                SESSION_COOKIE: forged_cookie(secret, {"sid": open_sid, "csrf": csrf})}) as ok:
            assert await is_admin(ok, key)


async def test_wrong_tokens_are_throttled_per_client_with_a_clear_429() -> None:
    from board_outbox.surface.console.security import LOGIN_FAILURES

    async with console(admin_token=TOKEN) as (_backend, client, key):
        for _ in range(LOGIN_FAILURES):
            assert (await login(client, token="x" * 20)).status_code == 403
        late = await login(client)  # the right token, too late: refused without a look at it
        assert late.status_code == 429 and "Too many wrong admin tokens" in late.text
        assert 1 <= int(late.headers["Retry-After"]) <= 60
        assert not await is_admin(client, key)


def test_the_throttle_counts_each_client_apart_and_forgets_after_its_window() -> None:
    from board_outbox.surface.console.security import LoginThrottle

    throttle = LoginThrottle(failures=3, window=60.0, clients=2)
    for t in (0.0, 1.0, 2.0):
        assert throttle.wait("a", t) == 0.0
        throttle.failed("a", t)
    assert throttle.wait("a", 3.0) == pytest.approx(57.0)  # the first failure leaves at 60
    assert throttle.wait("b", 3.0) == 0.0  # another client is not held back
    assert throttle.wait("a", 60.5) == 0.0  # one of three left the window
    throttle.failed("b", 61.0)
    throttle.failed("c", 61.0)  # a third client: the oldest one remembered is forgotten
    assert throttle.wait("a", 61.0) == 0.0
    throttle.succeeded("b")
    assert throttle.wait("b", 61.0) == 0.0


@pytest.mark.parametrize("token", [" " * 16, "\t" * 20, "\x00" * 16, "a-long-admin token!",
                                   "an-admin-token-with-a-bell\x07", "short-token-15c",
                                   "aaaaaaaaaaaaaaaaaaaaaaaa"])
def test_an_admin_token_without_real_entropy_is_a_config_error(token: str) -> None:
    with pytest.raises(ConfigError, match=r"ui\.admin_token"):
        load_config(env={}, ui={"admin_token": token})


def test_a_good_admin_token_is_accepted() -> None:
    assert load_config(env={}, ui={"admin_token": TOKEN}).ui.admin_token == TOKEN
    assert load_config(env={}, ui={"admin_token": "kH7#qP2!xZ9$mL4&"}).ui.admin_token


def test_a_bad_admin_token_is_one_line_and_exit_2(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[ui]\nadmin_token = "                "\nport = 0\n')
    got = subprocess.run([sys.executable, "-m", "board_outbox", "console", "--config", str(cfg)],
                         capture_output=True, text=True, timeout=60)
    assert got.returncode == 2, got.stderr
    assert got.stderr.count("\n") == 1 and "ui.admin_token" in got.stderr


async def test_posts_from_a_sibling_site_or_a_look_alike_origin_are_refused() -> None:
    async with console(admin_token=TOKEN) as (backend, client, key):
        await login(client)
        page = await client.get("/ui/dead-letters")
        form = {"csrf": csrf_of(page.text), "key": key}
        here = str(client.base_url).rstrip("/")
        host = here.split("://", 1)[1]
        for headers in ({"Sec-Fetch-Site": "same-site", "Origin": here},
                        {"Sec-Fetch-Site": "cross-site"},
                        {"Origin": f"http://evil.{host}"},  # ends with the host: not it
                        {"Origin": f"http://evil{host}"},
                        {"Origin": f"{here}.evil.example"},
                        {"Origin": f"https://{host}"}):
            r = await client.post("/ui/replay", data=form, headers=headers)
            assert r.status_code == 403, headers
        assert (await backend.outbox.get(key)).state == "failed"  # type: ignore[union-attr]
        ok = await client.post("/ui/replay/confirm", data=form,
                               headers={"Sec-Fetch-Site": "same-origin", "Origin": here})
        assert ok.status_code == 200

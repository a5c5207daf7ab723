"""The web console in a real browser (issue 25): headless Chromium (Debian's ``chromium`` and
``chromium-driver``; ``.ci/run`` installs them) drives the pages of a running ``board-outbox run``
on the wire server. A stalled tenant appears on the overview (every row write refused by a
``failCommand`` failpoint, so the tail cannot move); a dead-letter (the bot runner refuses the
launch) is opened, replayed with the admin token after the confirmation, and seen done; a
read-only session has no replay button and its forged POST is refused. The row page explains
the dead-letter's wait, and once replayed, that it is done (issue 33).

While a tenant is paused, its held launches are found from the Find rows form by card, by event
TENANT:SEQ and by state (a hostile query -- an operator object, a backward seq range -- is a
one-line message); "Cancel all matching…" opens the plan of the tenant's pending rows, the
operator narrows it to a retiring bot and applies it with a reason, the progress page reloads
itself until done, and the rows are ``cancelled`` on their pages and in the store, audited by
name and reason. On resume the tenant's other held launches run; the cancelled ones never
reach the bot runner.

The admin part goes through a TLS-terminating proxy started in the test (U3,
``tests/support/tls_proxy.py``: https on a self-signed certificate, ``X-Forwarded-*`` and the
operator's name in ``X-Forwarded-User``): the login over https, its cookie ``Secure``, and the
replay, the pause and the resume audited by the name the proxy gave; a login around the proxy
is refused.

``CONSOLE_SCREENSHOTS=DIR`` saves the main pages there as PNG (how docs/console/*.png
are made: ``CONSOLE_SCREENSHOTS=docs/console ./dev.sh test -n 0
tests/test_console_browser.py``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from pymongo import MongoClient

from tests.support.live_mongo import LiveServer
from tests.support.tls_proxy import TlsProxy, self_signed
from tests.support.waiting import wait_until
from tests.test_ops import free_port

pytestmark = [pytest.mark.live_mongo]

TOKEN = "console-admin-token-for-the-browser-test"
APP = "bo-console-browser"
JAEGER = "http://jaeger.example:16686"
TENANTS = ("acme", "globex", "initech")
OPERATOR = "ana@example.com"  # who the auth proxy says is signed in
BY = f"console:{OPERATOR}"
RETIRED = "globex.retired"  # a subscription whose held launches the operator cancels


def _chromium() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


class BotRunner:
    """The bot runner the ``http`` launcher posts to: refuses (400: permanent, the row parks at
    once) until told to accept. ``received`` holds the row key of every launch posted to it
    (the ``Idempotency-Key``), accepted or not."""

    def __init__(self) -> None:
        self.accept = False
        self.received: list[str] = []
        runner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                runner.received.append(str(self.headers.get("Idempotency-Key", "")))
                status = 200 if runner.accept else 400
                body = b'{"launch_id": "L1"}' if runner.accept else b"no such bot"
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_a: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/launch"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _plant_series(db: Any, minutes: int = 30, ahead: int = 3) -> None:
    """What another replica wrote to the rolling series over the last ``minutes`` minutes, and
    (as if written already) the next ``ahead``, so a minute ending during the test finds acme
    still the most behind: its counts (cumulative, each document past the previous one's) and
    acme's lag, rising."""
    from datetime import UTC, datetime

    last = int(time.time()) // 60 * 60 - 60 + ahead * 60
    minutes += ahead
    for i in range(minutes):
        minute = last - (minutes - 1 - i) * 60
        cum = {"materialized": 12 * (i + 1) + i * i, "done": 11 * (i + 1) + i * i,
               "dead": i // 7}
        base = {"materialized": 12 * i + (i - 1) ** 2 if i else 0,
                "done": 11 * i + (i - 1) ** 2 if i else 0, "dead": (i - 1) // 7 if i else 0}
        lag = [{"t": "acme", "n": 2 * i}, {"t": "globex", "n": i // 2}]
        db["trigger_series"].insert_one({
            "_id": f"{minute}/replica-b", "minute": minute, "replica": "replica-b",
            "counts": cum, "base": base, "lag_total": sum(e["n"] for e in lag), "behind": 2,
            "listed": 2, "lag": lag, "expire_at": datetime.fromtimestamp(minute + 3600, UTC)})


def _emit(db: Any, tenant: str, card: str = "c") -> int:
    seq = int(db["board_event_counters"].find_one_and_update(
        {"_id": tenant}, {"$inc": {"seq": 1}}, upsert=True, return_document=True)["seq"])
    db["board_events"].insert_one({"tenant_id": tenant, "seq": seq, "type": "card.created",
                                   "card_id": card, "at": time.time()})
    return seq


@pytest.fixture
def browser() -> Iterator[Any]:
    found = _chromium()
    if found is None:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium "
                    "chromium-driver; .ci/run does it)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as DriverService

    opts = webdriver.ChromeOptions()
    opts.binary_location = found[0]
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1360,900", "--force-device-scale-factor=1"):
        opts.add_argument(arg)
    opts.accept_insecure_certs = True  # the TLS proxy's certificate is made by the test
    driver = webdriver.Chrome(service=DriverService(found[1]), options=opts)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def failpoints(live: LiveServer) -> Iterator[MongoClient[dict[str, Any]]]:
    if not live.failpoints():
        pytest.skip("this server has no test commands (mongod: --setParameter enableTestCommands=1)")
    admin: MongoClient[dict[str, Any]] = MongoClient(live.uri, serverSelectionTimeoutMS=5000)
    yield admin
    admin.admin.command("configureFailPoint", "failCommand", mode="off")
    admin.close()


@pytest.mark.timeout(180)  # heavy: tens of seconds on a loaded machine (default 90 s)
def test_the_console_in_a_browser_over_a_running_service(
    live_uri: str, tmp_path: Path, browser: Any, failpoints: MongoClient[dict[str, Any]],
) -> None:
    from selenium.webdriver.common.by import By

    shots = os.environ.get("CONSOLE_SCREENSHOTS")
    shot_dir = Path(shots) if shots else tmp_path / "shots"
    shot_dir.mkdir(parents=True, exist_ok=True)

    def text_of(by: str, sel: str, contains: str, timeout: float = 15) -> str:
        """The element's text once it contains ``contains`` (a click that submits a form
        navigates on its own time: the old page may still be there)."""
        from selenium.common.exceptions import WebDriverException

        def look() -> str:
            try:
                text = str(browser.find_element(by, sel).text)
            except WebDriverException:
                # not there yet, or the page navigated between the find and the read: a stale
                # element, which chromedriver sometimes reports as "Node with given id does not
                # belong to the document" (a plain WebDriverException); the wait times out with
                # the selector if it never shows
                return ""
            return text if contains in text else ""

        return str(wait_until(look, timeout, f"{sel} showing {contains!r}"))

    def shot(name: str) -> None:
        browser.save_screenshot(str(shot_dir / f"{name}.png"))

    certificate = self_signed(tmp_path)
    if certificate is None:
        pytest.skip("openssl is not installed: the test's TLS proxy needs a certificate")
    name = f"console_{uuid.uuid4().hex[:8]}"
    client: MongoClient[dict[str, Any]] = MongoClient(live_uri)
    db = client[name]
    for t in TENANTS:
        db["trigger_subscriptions"].insert_one({"_id": f"{t}.s", "sub_id": f"{t}.s", "tenant_id": t,
                                                "bot": "triage-bot",
                                                "rule": {"event_types": ["card.created"]}})
        db["board_cards"].insert_one({"_id": f"{t}/c", "tenant_id": t, "card_id": "c",
                                      "title": "Fix login", "column": "inbox"})
    for card in ("c-1", "c-2"):  # the cards of the events the search finds
        db["board_cards"].insert_one({"_id": f"globex/{card}", "tenant_id": "globex",
                                      "card_id": card, "title": "Fix login", "column": "inbox"})
    # globex also launches a bot it is retiring: its held launches are the ones cancelled
    db["trigger_subscriptions"].insert_one({"_id": RETIRED, "sub_id": RETIRED, "tenant_id": "globex",
                                            "bot": "retired-bot",
                                            "rule": {"event_types": ["card.created"]}})
    _plant_series(db)
    runner = BotRunner()
    runner.accept = True
    port = free_port()
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[store]\nbackend = "mongo"\nuri = "{live_uri}"\ndatabase = "{name}"\n'
        f'app_name = "{APP}"\nop_timeout_seconds = 3\nserver_selection_timeout_seconds = 2\n'
        f'[tail]\nseed = "earliest"\npoll_interval_seconds = 0.2\nyoung_gap_seconds = 4\n'
        f'stall_seconds = 5\n'
        f'[service]\nmetrics_interval_seconds = 0.3\nreplica_name = "replica-a"\n'
        f'[launcher]\nkind = "http"\nurl = "{runner.url}"\ntimeout_seconds = 2\n'
        f'[ui]\nenabled = true\nadmin_token = "{TOKEN}"\njaeger_url = "{JAEGER}"\n'
        # the proxy reaches the port from 127.0.0.2; the test's own requests come from 127.0.0.1
        f'trusted_proxies = ["127.0.0.2"]\nidentity_header = "X-Forwarded-User"\n')
    env = {**os.environ, "BOARD_OUTBOX_SERVICE__HTTP_PORT": str(port)}
    log_path = tmp_path / "run.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "board_outbox", "run", "--config", str(cfg)],
                                env=env, stdout=subprocess.DEVNULL, stderr=log_file)
    base = f"http://127.0.0.1:{port}/ui"
    proxy = TlsProxy(f"http://127.0.0.1:{port}", *certificate, ("X-Forwarded-User", OPERATOR))
    try:
        try:
            wait_until(lambda: _get(f"http://127.0.0.1:{port}/readyz") == 200, 30, "the service ready")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{log_path.read_text()[-3000:]}") from None
        for t in TENANTS:
            for _ in range(2):
                _emit(db, t)
        # each event: a launch per subscription and the board's projection row
        wait_until(lambda: db["trigger_effects"].count_documents({"state": "done"}) == 14, 30,
                   "every first row done")

        # -- a stalled tenant appears: every row insert refused, acme's new events wait ------
        # (inserts only: the replica's membership heartbeat, an update, goes on, so a slow run
        # cannot see its lease lapse while it waits for the stall, and the overview still
        # lists it)
        failpoints.admin.command("configureFailPoint", "failCommand", mode="alwaysOn", data={
            "failCommands": ["insert"], "appName": APP, "errorCode": 50})
        _emit(db, "acme")
        browser.get(base + "/")
        assert "Overview" in browser.title

        def acme_stalled() -> bool:
            browser.get(base + "/")
            rows = browser.find_elements(By.CSS_SELECTOR, 'tr[data-tenant="acme"]')
            return bool(rows) and "stalled" in rows[0].text

        wait_until(acme_stalled, 30, "acme shown stalled on the overview")
        assert browser.find_element(By.ID, "stalled-count").text == "1"
        # caught up with no dead-letter: counted, not listed (the overview lists who needs a look)
        assert not browser.find_elements(By.CSS_SELECTOR, 'tr[data-tenant="globex"]')
        assert "caught up with no dead-letter" in browser.find_element(By.TAG_NAME, "main").text
        assert "replica-a" in browser.find_element(By.ID, "replicas").text
        # acme's lag over the last hour, drawn in its row (issue 33)
        assert browser.find_elements(By.CSS_SELECTOR, 'tr[data-tenant="acme"] svg.spark path')
        shot("overview")
        failpoints.admin.command("configureFailPoint", "failCommand", mode="off")

        def acme_recovered() -> bool:
            browser.get(base + "/")  # caught up again: it leaves the list
            return not browser.find_elements(By.CSS_SELECTOR, 'tr[data-tenant="acme"]')

        wait_until(acme_recovered, 30, "acme caught up again")

        # -- a dead-letter: the bot runner refuses the launch ---------------------------------
        runner.accept = False
        seq = _emit(db, "acme")
        key = f"acme/{seq}/sub/acme.s"
        wait_until(lambda: (db["trigger_effects"].find_one({"row_key": key}) or {}).get("state")
              == "failed", 30, "the launch parked as a dead-letter")

        # a read-only session: no replay button, and its forged POST is refused
        browser.get(base + "/dead-letters?tenant=acme")
        assert browser.find_elements(By.CSS_SELECTOR, f'tr[data-row="{key}"]')
        assert not browser.find_elements(By.ID, "replay-selected")
        assert browser.find_elements(By.ID, "mode-read-only")
        browser.get(base + "/rows/" + key)
        assert not browser.find_elements(By.ID, "replay-row")
        with httpx.Client(base_url=base, timeout=10) as anon:
            page = anon.get("/dead-letters")
            csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
            assert csrf is not None
            forged = anon.post("/replay", data={"csrf": csrf.group(1), "key": key},
                               headers={"Origin": f"http://127.0.0.1:{port}"})
            assert forged.status_code == 403
        assert db["trigger_effects"].find_one({"row_key": key})["state"] == "failed"

        browser.get(base + "/tenants/acme")
        assert "bot runner refused: 400" in browser.find_element(By.ID, "failures").text
        assert "board-reflect" in browser.find_element(By.ID, "generations").text
        shot("tenant")

        # -- a login around the proxy: no name from it, refused -----------------------------
        with httpx.Client(base_url=base, timeout=10) as around:
            page = around.get("/login")
            csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
            assert csrf is not None
            r = around.post("/login", data={"csrf": csrf.group(1), "token": TOKEN, "who": "ana"},
                            headers={"Origin": f"http://127.0.0.1:{port}",
                                     "X-Forwarded-User": OPERATOR})  # not believed from here
            assert r.status_code == 403 and "X-Forwarded-User" in r.text

        # -- through the TLS proxy: log in, open the dead-letter, replay it ----------------
        base = proxy.url + "/ui"
        browser.get(base + "/login")
        assert OPERATOR in browser.find_element(By.ID, "named").text
        browser.find_element(By.ID, "token").send_keys(TOKEN)
        browser.find_element(By.ID, "login").click()
        wait_until(lambda: browser.find_elements(By.ID, "mode-admin"), 10, "logged in")
        cookie = browser.get_cookie("board_outbox_console")
        assert cookie is not None and cookie["secure"] is True  # set over https, kept to it
        browser.get(base + "/dead-letters?tenant=acme&since=1h")
        shot("dead-letters")
        browser.find_element(By.CSS_SELECTOR, f'tr[data-row="{key}"] a.mono').click()
        text_of(By.ID, "row-state", "failed")
        trace = browser.find_elements(By.ID, "trace")
        if trace:  # the row carries a trace context when telemetry is on
            assert trace[0].get_attribute("href").startswith(JAEGER + "/trace/")
        assert "bot runner refused: 400" in browser.find_element(By.ID, "errors").text
        # the row explains its wait (issue 33, item 4): dead-lettered, the last error, the replay
        holds = browser.find_element(By.ID, "holds").text
        assert "failed" in holds and "bot runner refused: 400" in holds
        assert f"dead-letters replay {key}" in holds
        assert browser.find_elements(By.CSS_SELECTOR, 'tr[data-moment="attempt_parked"]')
        shot("row")
        browser.find_element(By.ID, "replay-row").click()
        confirm = text_of(By.ID, "confirm", "go back to pending")
        assert key in confirm
        shot("confirm")
        assert db["trigger_effects"].find_one({"row_key": key})["state"] == "failed"
        runner.accept = True
        browser.find_element(By.ID, "confirm-replay").click()
        text_of(By.TAG_NAME, "h1", "Replayed 1 of 1")

        def row_done() -> bool:
            browser.get(base + "/rows/" + key)
            return browser.find_element(By.ID, "row-state").text == "done"

        wait_until(row_done, 30, "the replayed row done")
        assert browser.find_element(By.CSS_SELECTOR, 'li[data-hold="done"]')
        assert browser.find_elements(By.CSS_SELECTOR, 'tr[data-moment="replay"]')
        audit = browser.find_element(By.ID, "audit").text
        assert "replay" in audit and BY in audit
        doc = db["trigger_effects"].find_one({"row_key": key})
        assert [(a["action"], a["by"]) for a in doc["audit"]] == [("replay", BY)]

        # -- pause a tenant from its page (issue 33): its next launches are held -------------
        browser.get(base + "/tenants/globex")
        browser.find_element(By.ID, "pause-reason").send_keys("customer asked")
        browser.find_element(By.ID, "pause-tenant").click()
        text_of(By.ID, "tenant-pause", "Paused")
        assert BY in browser.find_element(By.ID, "tenant-pause").text
        # the replica reads the pauses with its membership heartbeat: emit once it has
        wait_until(lambda: 'board_outbox_pauses{scope="tenant"} 1.0' in _metrics(port), 30,
                   "the replica has read the pause")
        # two events on two cards: each a launch per subscription, all four held
        seqs = [_emit(db, "globex", card) for card in ("c-1", "c-2")]
        kept = [f"globex/{n}/sub/globex.s" for n in seqs]  # run on resume
        doomed = [f"globex/{n}/sub/{RETIRED}" for n in seqs]  # cancelled while held

        def held() -> bool:
            docs = db["trigger_effects"].find({"row_key": {"$in": kept + doomed}})
            return sum(d.get("waiting") == "paused: tenant globex" for d in docs) == 4

        wait_until(held, 30, lambda: "globex's new launches held by the pause: " + repr(
            [(d["row_key"], d["state"], d.get("waiting")) for d in db["trigger_effects"].find(
                {"tenant_id": "globex", "seq": {"$in": seqs}})]))
        browser.get(base + "/pauses")
        assert "customer asked" in browser.find_element(By.ID, "pauses").text
        shot("pauses")
        browser.get(base + "/tenants/globex")
        text_of(By.ID, "tenant-pause", "4 rows held")

        # -- find rows from the search box: by card, by event, by state ------------------------
        def find(**fields: str) -> tuple[str, list[str]]:
            """Fill the Find rows form from the nav bar's link and submit it: the result line
            (or the one-line error) and the row keys listed."""
            was = browser.find_element(By.TAG_NAME, "html")  # may be a Find rows page too
            browser.find_element(By.ID, "nav-find").click()
            wait_until(lambda: _stale(was), 15, "the Find rows page opened")
            form = wait_until(lambda: browser.find_elements(By.ID, "search"), 15,
                              "the search form")[0]
            for field, value in fields.items():
                form.find_element(By.NAME, field).send_keys(value)
            form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
            wait_until(lambda: _stale(form), 15, f"the search {fields} submitted")
            said = str(wait_until(lambda: (browser.find_elements(By.ID, "found")
                                           or browser.find_elements(By.ID, "message")), 15,
                                  f"the search {fields} answered")[0].text)
            return said, [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#rows a.mono")]

        said, keys = find(card="c-2", tenant="globex")
        assert kept[1] in keys and doomed[1] in keys and not {kept[0], doomed[0]} & set(keys), keys
        assert said == f"{len(keys)} rows: card c-2 of tenant globex", said
        said, keys = find(event=f"globex:{seqs[0]}")
        assert {kept[0], doomed[0]} <= set(keys) and not {kept[1], doomed[1]} & set(keys), keys
        assert said.endswith(f"event globex:{seqs[0]}"), said
        for hostile, why in (({"state": '{"$ne": null}'}, "one of"),
                             ({"seq_range": "9..1", "tenant": "globex"}, "must not be above")):
            said, keys = find(**hostile)
            assert why in said and "\n" not in said and not keys, (hostile, said)
            assert "Traceback" not in browser.page_source
        said, keys = find(state="pending", tenant="globex")
        assert sorted(keys) == sorted(kept + doomed), keys
        shot("find")

        # -- cancel all matching: the plan, narrowed to the retired bot, then applied -----------
        browser.find_element(By.ID, "cancel-matching").click()
        assert text_of(By.ID, "matched", "4") == "4"  # every pending globex row
        plan = browser.find_element(By.ID, "plan")  # the old page's: stale once re-planned
        browser.find_element(By.NAME, "bot").send_keys("retired-bot")
        browser.find_element(By.CSS_SELECTOR, "form.filters button[type=submit]").click()
        wait_until(lambda: _stale(plan), 15, "the plan read again")
        assert text_of(By.ID, "matched", "2") == "2"
        assert "tenant=globex" in browser.current_url and "bot=retired-bot" in browser.current_url
        assert RETIRED in browser.find_element(By.ID, "by-subscription").text
        shot("cancel-plan")
        assert {d["state"] for d in db["trigger_effects"].find(
            {"row_key": {"$in": doomed}})} == {"pending"}  # the plan changed nothing
        browser.find_element(By.NAME, "reason").send_keys("bot retired")
        rate = browser.find_element(By.NAME, "rate")
        rate.clear()
        rate.send_keys("50")
        browser.find_element(By.ID, "apply-plan").click()
        text_of(By.TAG_NAME, "h1", "Bulk cancel")
        text_of(By.ID, "state", "done", timeout=20)  # the page reloads itself while it runs
        assert browser.find_element(By.ID, "replayed").text == "2"
        assert browser.find_element(By.ID, "remaining").text == "0"
        assert browser.find_element(By.ID, "back").text == "Back to Find rows"
        for k in doomed:
            doc = db["trigger_effects"].find_one({"row_key": k})
            assert doc["state"] == "cancelled", doc
            assert [(a["action"], a["by"]) for a in doc["audit"]] == [("cancel", BY)]
            assert doc["audit"][0]["detail"].startswith("bot retired (bulk cancel ")
        _said, keys = find(state="cancelled", tenant="globex")
        assert sorted(keys) == sorted(doomed), keys
        browser.find_element(By.LINK_TEXT, doomed[0]).click()
        assert text_of(By.ID, "row-state", "cancelled") == "cancelled"
        audit = browser.find_element(By.ID, "audit").text
        assert "cancel" in audit and BY in audit and "bot retired" in audit

        # -- resume: the kept launches run, the cancelled ones never reach the bot ---------------
        browser.get(base + "/tenants/globex")
        text_of(By.ID, "tenant-pause", "2 rows held")
        browser.find_element(By.ID, "resume-tenant").click()
        text_of(By.ID, "tenant-pause", "Not paused")
        wait_until(lambda: db["trigger_effects"].count_documents(
            {"row_key": {"$in": kept}, "state": "done"}) == 2, 30,
            "the held launches done after resume")
        for k in kept:
            doc = db["trigger_effects"].find_one({"row_key": k})
            assert doc.get("attempts", 0) == 0 and not doc.get("errors")
        assert set(kept) <= set(runner.received)
        assert not set(doomed) & set(runner.received), runner.received
        assert {d["state"] for d in db["trigger_effects"].find(
            {"row_key": {"$in": doomed}})} == {"cancelled"}
        pause_doc = db["board_outbox_pauses"].find_one({"_id": "tenant:globex"})
        assert [(a["action"], a["by"]) for a in pause_doc["audit"]] == [
            ("pause", BY), ("resume", BY)]

        # -- the charts: drawn on the server, in the page (issue 33) ------------------------
        browser.find_element(By.ID, "nav-charts").click()
        text_of(By.TAG_NAME, "h1", "Charts")
        for chart in ("chart-throughput", "chart-dead", "chart-lag", "chart-tenant-lag"):
            svg = browser.find_element(By.CSS_SELECTOR, f"#{chart} svg")
            assert svg.size["width"] > 300 and svg.size["height"] > 100
            assert svg.find_elements(By.CSS_SELECTOR, "path.line")
        lines = browser.find_elements(By.CSS_SELECTOR, "#chart-tenant-lag path.line")
        assert [p.get_attribute("data-label") for p in lines][:1] == ["acme"]
        drawn = browser.find_element(By.CSS_SELECTOR, "#chart-throughput path.line")
        assert drawn.get_attribute("d").count("L") >= 20  # a line across the minutes
        shot("charts")
        assert proc.poll() is None
    finally:
        proxy.close()
        proc.terminate()
        try:
            rc = proc.wait(timeout=30)
            # on the way out the service wrote its own series once (its minute so far)
            own = list(db["trigger_series"].find({"replica": {"$regex": "^replica-a:"}}))
        finally:
            if proc.poll() is None:
                proc.kill()
            runner.close()
            client.drop_database(name)
            client.close()
    assert rc == 0, log_path.read_text()[-3000:]
    # the login is logged with the client and the proxy it came through
    assert f"{OPERATOR} logged in from 127.0.0.1 (through the proxy at 127.0.0.2)" in (
        log_path.read_text())
    assert own and max(d["counts"]["done"] for d in own) >= 14, own


def _stale(element: Any) -> bool:
    """The element's page has gone (a form's submit navigated away)."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException:  # chromedriver's "does not belong to the document": gone too
        return True
    return False


def _metrics(port: int) -> str:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.TransportError:
        return ""


def _get(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=2).status_code
    except httpx.TransportError:
        return None

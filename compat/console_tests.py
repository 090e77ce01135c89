#!/usr/bin/env python3
"""Browser tests of the console: headless Chromium (through chromedriver) and headless
Firefox (through its built-in WebDriver BiDi) against a
real shale-broker whose topic lives mostly in a real S3 server (s3s-fs) and whose
group lags. Every page is opened and screenshotted; the numbers shown are compared
with the API's; a config is edited, a group's offsets are reset (both through the
confirmation dialog), and a record found by a key that lives only in the object
store. Run by infra/console-tests.sh, which installs Chromium and chromedriver.

Usage: console_tests.py [--screenshots DIR] [--chromium-only]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from bidi import Firefox  # noqa: E402
from webdriver import Browser  # noqa: E402

RECORDS = 4000
KEYS = 200


def s3s_fs():
    for c in [os.environ.get("SHALE_TEST_S3S_FS"), shutil.which("s3s-fs"),
              os.path.expanduser("~/.cargo/bin/s3s-fs")]:
        if c and os.access(c, os.X_OK):
            return c
    raise SystemExit("s3s-fs is not installed: run infra/test-services.sh")


def start_broker(args, log):
    """A shale-broker with `args`, logging to `log`, once it is ready."""
    broker = subprocess.Popen([harness.BROKER_BIN, *args], stdout=subprocess.DEVNULL,
                              stderr=open(log, "w"))
    deadline = time.time() + 60
    while "shale-broker ready" not in open(log).read():
        if broker.poll() is not None or time.time() > deadline:
            raise RuntimeError("the broker did not start:\n" + open(log).read()[-3000:])
        time.sleep(0.1)
    return broker


class Stack:
    """s3s-fs and one broker with Kafka, gRPC and HTTP listeners."""

    def __init__(self, work):
        self.work = work
        s3_port, self.grpc, self.http = (harness.free_port() for _ in range(3))
        self.kafka = harness.free_port()
        os.makedirs(os.path.join(work, "s3", "shale"))
        self.s3 = subprocess.Popen([s3s_fs(), "--host", "127.0.0.1", "--port", str(s3_port),
                                    "--access-key", "console", "--secret-key", "console-secret",
                                    os.path.join(work, "s3")],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cfg = os.path.join(work, "shale.toml")
        with open(cfg, "w") as f:
            f.write(f"""[object_store]
endpoint = "http://127.0.0.1:{s3_port}"
region = "us-east-1"
path_style = true
allow_http = true
access_key_id = "console"
secret_access_key = "console-secret"
[tiering]
upload_interval_ms = 200
[log]
retention_check_interval_ms = 200
[groups]
initial_rebalance_delay_ms = 200
""")
        self.log = os.path.join(work, "broker.log")
        self.broker = start_broker(
            ["--config", cfg, "--data-dir", os.path.join(work, "data"),
             "--listen", f"127.0.0.1:{self.grpc}", "--kafka-listen", f"127.0.0.1:{self.kafka}",
             "--http-listen", f"127.0.0.1:{self.http}", "--object-store-url", "s3://shale/console"],
            self.log)

    def url(self, fragment=""):
        return f"http://127.0.0.1:{self.http}/{fragment}"

    def api(self, path, method="GET", body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://127.0.0.1:{self.http}/api/v1{path}", data=data,
                                     method=method, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def shale(self, *args, input=None):
        out = subprocess.run([harness.CLI_BIN, "--bootstrap", f"127.0.0.1:{self.grpc}", *args],
                             input=input, capture_output=True, timeout=120)
        if out.returncode != 0:
            raise AssertionError(f"shale {' '.join(args)}: {out.stderr.decode()}")
        return out.stdout.decode()

    def stop(self):
        for p in (self.broker, self.s3):
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


def prepare(stack):
    """A tiered topic whose history is only in the object store, and a lagging group."""
    stack.api("/topics", "POST", {"name": "logs", "partitions": 2, "configs": {
        "segment.bytes": "8192", "local.retention.bytes": "1"}})
    # The first records have keys of their own: they end up only in the object store.
    key = lambda i: f"boot-{i}" if i < 50 else f"host-{i % KEYS}"  # noqa: E731
    lines = "".join(f"{key(i)}|{{\"seq\":{i},\"msg\":\"request served in {i % 97} ms\"}}\n"
                    for i in range(RECORDS))
    stack.shale("produce", "logs", "-K", "|", "--batch-size", "4096", input=lines.encode())
    deadline = time.time() + 60
    while True:
        t = stack.api("/tiering?topic=logs")["partitions"]
        if all(p["upload_lag_segments"] == 0 and p["local_log_start_offset"] > 0 for p in t):
            break
        if time.time() > deadline:
            raise AssertionError(f"uploads did not finish: {t}")
        time.sleep(0.2)
    stack.shale("consume", "logs", "--group", "analytics", "--from-beginning", "-c", "1000")
    # Traffic samples for the overview's chart come every 5 s.
    deadline = time.time() + 30
    while len(stack.api("/overview")["rates"]) < 3 and time.time() < deadline:
        time.sleep(0.5)


def remote_only_key(stack):
    """A key every record of which lies below its partition's local log start."""
    parts = {p["partition"]: p for p in stack.api("/topics/logs")["partitions"]}
    for k in range(50):
        f = stack.api(f"/topics/logs/find?key=boot-{k}")
        recs = f["records"]
        if recs and all(r["offset"] < parts[r["partition"]]["local_log_start_offset"] for r in recs):
            return f"boot-{k}", f
    raise AssertionError("no key lives only in the object store")


def open_page(b, stack, fragment, page, shots):
    b.get(stack.url(fragment))
    b.wait(f"document.querySelector('main#page').dataset.page === '{page}'", what=f"page {page}")
    errors = b.js("return [...document.querySelectorAll('[data-message=error]')].map(e => e.textContent)")
    assert not errors, f"{page} shows errors: {errors}"
    assert not b.js("return [...document.querySelector('main#page').childNodes]"
                    ".some(n => n.nodeType === 3 && n.textContent.trim() === 'null')"), f"{page} shows 'null'"
    b.screenshot(os.path.join(shots, f"{page}.png"))


def field_values(b, row_css):
    """{row key: {field: data-value}} of the rows matching row_css."""
    return b.js("""
      const out = {};
      for (const row of document.querySelectorAll(arguments[0])) {
        const key = Object.values(row.dataset)[0];
        out[key] = {};
        for (const c of row.querySelectorAll('[data-field]')) out[key][c.dataset.field] = c.dataset.value ?? c.textContent;
      }
      return out;""", row_css)


def num(v):
    return None if v in ("", None) else int(v)


def test_overview(b, stack, shots):
    open_page(b, stack, "#/", "overview", shots)
    o = stack.api("/overview")
    cards = b.js("return Object.fromEntries([...document.querySelectorAll('[data-card]')].map(c => [c.dataset.card, c.querySelector('.n').dataset.value]))")
    assert int(cards["topics"]) == o["topics"], (cards, o["topics"])
    assert int(cards["partitions"]) == o["partitions"], cards
    assert int(cards["under_replicated"]) == len(o["under_replicated"]) == 0, cards
    assert int(cards["offline"]) == len(o["offline"]) == 0, cards
    assert cards["brokers"] == f"{len(o['brokers'])}/{len(o['brokers'])}", cards
    assert cards["controller"] == str(o["controller"]["broker_id"]), cards
    assert b.js("return document.querySelectorAll('[data-chart=rates] polyline').length") == 2, "the traffic chart"
    rows = field_values(b, "tr[data-broker]")
    assert rows["0"]["alive"] == "alive" and num(rows["0"]["replica_partitions"]) == o["brokers"][0]["replica_partitions"], rows
    assert num(rows["0"]["moving_partitions"]) == o["brokers"][0]["moving_partitions"] == 0, rows
    if len(o["rates"]) >= 2:
        assert b.js("return document.querySelectorAll('[data-chart=rates] [data-axis=time]').length") == 3, "the time axis"


def test_topics(b, stack, shots):
    open_page(b, stack, "#/topics", "topics", shots)
    api = {t["name"]: t for t in stack.api("/topics")["topics"]}
    rows = field_values(b, "tr[data-topic]")
    assert set(rows) == set(api), (rows, api)
    for name, row in rows.items():
        for f in ("partition_count", "replication_factor", "local_bytes", "remote_bytes"):
            assert num(row[f]) == api[name][f], (name, f, row, api[name])
    assert api["logs"]["remote_bytes"] > api["logs"]["local_bytes"] > 0, api["logs"]
    # local.retention.bytes=1, and local.retention.ms a day by default, capped by the
    # total (which the topic test may have lowered); the total has no size bound.
    t = api["logs"]
    assert t["local_retention_bytes"] == 1 and t["retention_bytes"] == -1, t
    assert t["local_retention_ms"] == min(86400000, t["retention_ms"]) > 0, t
    assert rows["logs"]["local_retention"].endswith(" or 1 B per partition"), rows["logs"]
    assert rows["logs"]["retention"] not in ("forever", ""), rows["logs"]
    assert b.js("return document.querySelector('tr[data-topic=logs] .bar .remote').style.width") != "0%"
    # The pages link to each other: the topic's link opens its page.
    b.click("tr[data-topic=logs] a")
    b.wait("document.querySelector('main#page').dataset.page === 'topic'", what="the topic page")


def test_topic(b, stack, shots, key, found, retention):
    open_page(b, stack, "#/topic/logs", "topic", shots)
    api = {str(p["partition"]): p for p in stack.api("/topics/logs")["partitions"]}
    rows = field_values(b, "tr[data-partition]")
    assert set(rows) == set(api), rows
    for p, row in rows.items():
        for f in ("leader", "log_start_offset", "local_log_start_offset", "high_watermark",
                  "log_end_offset", "local_bytes", "remote_bytes"):
            assert num(row[f]) == api[p][f], (p, f, row, api[p])
        assert row["isr"] == ",".join(map(str, api[p]["isr"]))

    # Records from offset 0: in the object store.
    b.select("#rec-partition", "1")
    b.type("#rec-offset", "0")
    b.click("#rec-read")
    b.wait("document.querySelector('#rec-table tbody tr')", what="records")
    shown = b.js("return [...document.querySelectorAll('#rec-table tbody tr')].map(r => [+r.dataset.offset, r.querySelector('[data-field=key] pre').textContent])")
    want = stack.api("/topics/logs/partitions/1/records?offset=0&count=50")["records"]
    assert shown == [[r["offset"], r["key"]["data"]] for r in want], (shown[:3], want[:3])
    b.screenshot(os.path.join(shots, "topic-records.png"))

    # Find by key: every record of a key that lives only in the object store.
    b.type("#find-key", key)
    b.click("#find-go")
    b.wait("document.querySelector('#find-stats')", what="the lookup")
    count = int(b.js("return document.querySelector('#find-stats').dataset.found"))
    rows = b.js("return [...document.querySelectorAll('#find-table tbody tr')].map(r => [+r.querySelector('[data-field=partition]').dataset.value, +r.dataset.offset, r.querySelector('[data-field=key] pre').textContent])")
    assert count == len(found["records"]) > 0, (count, found)
    assert rows == [[r["partition"], r["offset"], key] for r in found["records"]], rows
    stats = b.js("return document.querySelector('#find-stats').textContent")
    assert "skipped by their key filter" in stats, stats
    b.screenshot(os.path.join(shots, "topic-find.png"))

    # Kafka's "no limit" (the largest 64-bit value) is said in words.
    unlimited = [c["name"] for c in stack.api("/topics/logs")["configs"] if c["value"] == "9223372036854775807"]
    assert unlimited, "no config of the topic is unlimited"
    means = b.js("return Object.fromEntries([...document.querySelectorAll('[data-means]')].map(e => [e.dataset.means, e.textContent.trim()]))")
    assert means == {n: "forever" if n.endswith(".ms") else "unlimited" for n in unlimited}, (means, unlimited)

    # A config edit asks first: Cancel changes nothing, Confirm writes it.
    b.type("input[data-config='retention.ms']", str(retention))
    b.click("button[data-save='retention.ms']")
    b.wait("!document.getElementById('confirm').hidden", what="the confirmation")
    b.click("#confirm-no")
    time.sleep(0.5)
    assert stack.api("/topics/logs")["retention_ms"] != retention
    b.click("button[data-save='retention.ms']")
    b.wait("!document.getElementById('confirm').hidden", what="the confirmation")
    b.screenshot(os.path.join(shots, "topic-confirm.png"))
    b.click("#confirm-yes")
    b.wait("document.querySelector('[data-message=notice]')", what="the saved notice")
    t = stack.api("/topics/logs")
    assert t["retention_ms"] == retention, t["retention_ms"]
    assert any(c["name"] == "retention.ms" and c["source"] == "topic" for c in t["configs"])
    b.wait("document.querySelector(\"[data-source='retention.ms']\") && document.querySelector(\"[data-source='retention.ms']\").textContent === 'topic'",
           what="the page showing the new config")


def test_groups(b, stack, shots):
    open_page(b, stack, "#/groups", "groups", shots)
    rows = field_values(b, "tr[data-group]")
    api = {g["group"]: g for g in stack.api("/groups")["groups"]}
    assert "analytics" in rows and rows["analytics"]["state"] == api["analytics"]["state"], rows
    b.click("tr[data-group=analytics] a")
    b.wait("document.querySelector('main#page').dataset.page === 'group'", what="the group page")
    g = stack.api("/groups/analytics")
    assert g["total_lag"] > 0, g
    b.screenshot(os.path.join(shots, "group.png"))
    cards = b.js("return Object.fromEntries([...document.querySelectorAll('[data-card]')].map(c => [c.dataset.card, c.querySelector('.n').dataset.value]))")
    assert int(cards["total_lag"]) == g["total_lag"], (cards, g["total_lag"])
    bars = b.js("return [...document.querySelectorAll('[data-chart=lag] rect')].map(r => +r.dataset.value)")
    assert bars == [p["lag"] or 0 for p in g["partitions"]], (bars, g["partitions"])
    rows = field_values(b, "tr[data-partition]")
    for p in g["partitions"]:
        row = rows[f"{p['topic']}-{p['partition']}"]
        for f in ("committed_offset", "high_watermark", "lag"):
            assert num(row[f]) == p[f], (f, row, p)
    # No members: said, not an empty table.
    assert not g["members"], g["members"]
    assert b.js("return !!document.querySelector('[data-empty=members]')"), "an empty Members table"

    # Reset to the earliest offsets, through the confirmation.
    b.select("#reset-to", "earliest")
    b.click("#reset-go")
    b.wait("!document.getElementById('confirm').hidden", what="the confirmation")
    b.click("#confirm-yes")
    b.wait("document.querySelector('[data-message=notice]')", what="the reset notice")
    g = stack.api("/groups/analytics")
    starts = {p["partition"]: p["log_start_offset"] for p in stack.api("/topics/logs")["partitions"]}
    assert all(p["committed_offset"] == starts[p["partition"]] for p in g["partitions"]), g
    assert g["total_lag"] == sum(p["high_watermark"] for p in g["partitions"]), g
    b.wait(f"document.querySelector('[data-card=total_lag] .n').dataset.value === '{g['total_lag']}'",
           what="the page showing the reset lag")


def test_brokers(b, stack, shots):
    open_page(b, stack, "#/brokers", "brokers", shots)
    rows = field_values(b, "tr[data-broker]")
    api = stack.api("/brokers")["brokers"]
    assert set(rows) == {str(x["broker_id"]) for x in api}
    assert rows["0"]["alive"] == "alive"
    assert num(rows["0"]["leader_partitions"]) == api[0]["leader_partitions"] == 2
    # Authorization is off on this broker: the ACL page says so.
    b.click("a[data-nav=acls]")
    b.wait("document.querySelector('main#page').dataset.page === 'acls'", what="the ACL page")
    assert stack.api("/acls")["authorization_enabled"] is False
    b.wait("document.querySelector('[data-message=notice]') && /Authorization is off/.test(document.querySelector('[data-message=notice]').textContent)",
           what="the notice that authorization is off")
    b.click("a[data-nav=overview]")
    b.wait("document.querySelector('main#page').dataset.page === 'overview'", what="the overview")


class LoginStack:
    """One broker whose HTTP listener wants a login, with authorization on. Its admin
    user is the inter-broker user, which the broker creates at start."""

    def __init__(self, work):
        self.work = work
        self.grpc, self.http, self.internal = (harness.free_port() for _ in range(3))
        with open(os.path.join(work, "admin-password"), "w") as f:
            f.write("admin-pw\n")
        cfg = os.path.join(work, "login.toml")
        with open(cfg, "w") as f:
            f.write(f"""[listeners.grpc]
listen = "127.0.0.1:{self.grpc}"
[listeners.http]
listen = "127.0.0.1:{self.http}"
security_protocol = "SASL_PLAINTEXT"
[listeners.internal]
protocol = "grpc"
listen = "127.0.0.1:{self.internal}"
security_protocol = "SASL_PLAINTEXT"
[cluster]
inter_broker_listener = "internal"
inter_broker_user = "admin"
inter_broker_password_file = "{work}/admin-password"
[authorization]
enable = true
super_users = ["User:admin"]
""")
        self.log = os.path.join(work, "login-broker.log")
        self.broker = start_broker(["--config", cfg, "--data-dir", os.path.join(work, "login-data")],
                                   self.log)

    def url(self, fragment=""):
        return f"http://127.0.0.1:{self.http}/{fragment}"

    def api(self, path):
        """A GET as the admin user (Basic credentials)."""
        import base64
        auth = base64.b64encode(b"admin:admin-pw").decode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.http}/api/v1{path}",
                                     headers={"Authorization": f"Basic {auth}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def stop(self):
        self.broker.terminate()
        try:
            self.broker.wait(30)
        except subprocess.TimeoutExpired:
            self.broker.kill()


def test_login_and_acls(b, stack, shots):
    # Any view asks for a login first; the API refuses without one.
    open_page(b, stack, "#/topics", "login", shots)
    try:
        urllib.request.urlopen(stack.url("api/v1/topics"), timeout=10)
        raise AssertionError("the API answered without a login")
    except urllib.error.HTTPError as e:
        assert e.code == 401, e.code
    b.type("#login-user", "admin")
    b.type("#login-password", "wrong")
    b.click("#login-go")
    b.wait("document.querySelector('#login-status [data-message=error]')", what="the refusal")
    assert b.js("return document.querySelector('main#page').dataset.page") == "login"
    b.type("#login-password", "admin-pw")
    b.click("#login-go")
    b.wait("document.querySelector('main#page').dataset.page === 'topics'", what="the topics after the login")
    b.wait("document.getElementById('principal') && document.getElementById('principal').textContent === 'User:admin'",
           what="the user in the header")
    cookie_visible = b.js("return document.cookie")
    assert "shale_session" not in cookie_visible, "the session cookie is readable by scripts"

    # The ACL page: add a binding through the form, see it, remove it.
    b.click("a[data-nav=acls]")
    b.wait("document.querySelector('main#page').dataset.page === 'acls'", what="the ACL page")
    b.type("#acl-principal", "User:alice")
    b.select("#acl-operation", "READ")
    b.select("#acl-resource_type", "TOPIC")
    b.select("#acl-pattern_type", "PREFIXED")
    b.type("#acl-resource_name", "logs.")
    b.click("#acl-add")
    row = "User:alice|ALLOW|READ|TOPIC|PREFIXED|logs.|*"
    b.wait(f"document.querySelector('tr[data-acl=\"{row}\"]')", what="the new binding")
    b.screenshot(os.path.join(shots, "acls.png"))
    assert stack.api("/acls")["authorization_enabled"] is True
    assert not b.js("return !!document.querySelector('[data-message=notice]')"), "an authorization-off notice with authorization on"
    acls = stack.api("/acls")["acls"]
    assert [(a["principal"], a["operation"], a["pattern_type"], a["resource_name"]) for a in acls] == \
        [("User:alice", "READ", "PREFIXED", "logs.")], acls
    b.click(f"button[data-remove=\"{row}\"]")
    b.wait("!document.getElementById('confirm').hidden", what="the confirmation")
    b.click("#confirm-yes")
    b.wait(f"!document.querySelector('tr[data-acl=\"{row}\"]') && document.querySelector('main#page').dataset.page === 'acls'",
           what="the binding gone")
    assert stack.api("/acls")["acls"] == []

    # Logging out: back to the login form.
    b.click("#logout")
    b.wait("document.querySelector('main#page').dataset.page === 'login'", what="the login form after logging out")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--screenshots", default=os.path.join(harness.ROOT, "target", "console-screenshots"))
    ap.add_argument("--chromium-only", action="store_true", help="skip Firefox")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="shale-console-")
    stack = Stack(work)
    login = LoginStack(work)
    browser = None
    r = harness.Results()
    try:
        prepare(stack)
        key, found = remote_only_key(stack)
        browsers = [("chromium", lambda: Browser(log=os.path.join(work, "chromedriver.log")), 3600000)]
        if not args.chromium_only:
            browsers.append(("firefox", lambda: Firefox(log=os.path.join(work, "firefox.log")), 7200000))
        for name, start, retention in browsers:
            browser = start()
            shots = os.path.join(args.screenshots, name)
            r.check(name, "overview: numbers, chart and brokers equal the API's", test_overview, browser, stack, shots)
            r.check(name, "topics: sizes as bars, equal the API's; links to the topic", test_topics, browser, stack, shots)
            r.check(name, "topic: offsets, remote records, find a remote-only key, edit a config", test_topic,
                    browser, stack, shots, key, found, retention)
            r.check(name, "groups: lag chart equals the API's; reset offsets", test_groups, browser, stack, shots)
            r.check(name, "brokers page and navigation", test_brokers, browser, stack, shots)
            r.check(name, "login required: refused, logged in, ACL page adds and removes, log out",
                    test_login_and_acls, browser, login, shots)
            browser.quit()
            browser = None
    finally:
        if browser:
            browser.quit()
        stack.stop()
        login.stop()
    print(f"screenshots in {args.screenshots}")
    code = r.summary()
    if code:
        print(f"broker logs: {stack.log} {login.log}", file=sys.stderr)
        sys.exit(code)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""A small W3C WebDriver client (the protocol chromedriver speaks), on the standard
library alone: sessions, navigation, elements, clicks, typing, scripts, screenshots."""

import base64
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"


class WebDriverError(Exception):
    pass


def wait_for(browser, script, timeout=20, what="a condition"):
    """Until the script (a JS expression) is truthy in the browser's page; its value."""
    deadline = time.time() + timeout
    while True:
        v = browser.js(f"return ({script});")
        if v:
            return v
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {script}")
        time.sleep(0.1)


class Browser:
    """A headless Chromium driven through chromedriver on a loopback port."""

    def __init__(self, chromium="/usr/bin/chromium", driver="/usr/bin/chromedriver", log=None):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = open(log, "w") if log else subprocess.DEVNULL
        self.proc = subprocess.Popen([driver, f"--port={self.port}"], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise WebDriverError("chromedriver did not start")
                time.sleep(0.1)
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1440,1100", "--no-first-run", "--disable-extensions"]},
        }}}
        self.session = self._call("POST", "/session", caps)["sessionId"]

    def _call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                out = json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise WebDriverError(f"{method} {path}: {e.read().decode()[:2000]}") from None
        value = out.get("value")
        return value if "sessionId" not in out else out

    def cmd(self, method, path, body=None):
        return self._call(method, f"/session/{self.session}{path}", body)

    def get(self, url):
        self.cmd("POST", "/url", {"url": url})

    def find(self, css):
        return self.cmd("POST", "/element", {"using": "css selector", "value": css})[ELEMENT]

    def find_all(self, css):
        return [e[ELEMENT] for e in self.cmd("POST", "/elements", {"using": "css selector", "value": css})]

    def click(self, css):
        self.cmd("POST", f"/element/{self.find(css)}/click", {})

    def type(self, css, text, clear=True):
        el = self.find(css)
        if clear:
            self.cmd("POST", f"/element/{el}/clear", {})
        self.cmd("POST", f"/element/{el}/value", {"text": text})

    def select(self, css, value):
        self.click(f"{css} option[value='{value}']")

    def js(self, script, *args):
        return self.cmd("POST", "/execute/sync", {"script": script, "args": list(args)})

    def wait(self, script, timeout=20, what="a condition"):
        return wait_for(self, script, timeout, what)

    def screenshot(self, path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(self.cmd("GET", "/screenshot")))

    def quit(self):
        try:
            self.cmd("DELETE", "")
        except Exception:
            pass
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()

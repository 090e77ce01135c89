"""Firefox driven through WebDriver BiDi (built into Firefox: no geckodriver), on the
standard library alone: a minimal WebSocket client, sessions, navigation, scripts,
screenshots. Offers the same calls as webdriver.Browser, with clicks and typing done
by script in the page."""

import base64
import json
import os
import re
import socket
import struct
import subprocess
import tempfile
import time

from webdriver import wait_for


class BiDiError(Exception):
    pass


class _WebSocket:
    def __init__(self, host, port, path):
        self.sock = socket.create_connection((host, port), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise BiDiError("the WebSocket handshake was cut off")
            head += chunk
        status, _, rest = head.partition(b"\r\n\r\n")
        if b" 101 " not in status.split(b"\r\n")[0]:
            raise BiDiError(f"WebSocket upgrade refused: {status[:200]!r}")
        self.buf = rest

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise BiDiError("the WebSocket closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def send(self, text):
        data = text.encode()
        mask = os.urandom(4)
        n = len(data)
        if n < 126:
            head = struct.pack("!BB", 0x81, 0x80 | n)
        elif n < 65536:
            head = struct.pack("!BBH", 0x81, 0x80 | 126, n)
        else:
            head = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def recv(self):
        message = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read(8))[0]
            payload = self._read(n)
            opcode = b0 & 0x0F
            if opcode == 0x8:
                raise BiDiError("the WebSocket closed")
            if opcode in (0x9, 0xA):  # ping, pong
                continue
            message += payload
            if b0 & 0x80:
                return message.decode()


def _value(v):
    """A BiDi RemoteValue as Python."""
    t = v.get("type")
    if t in ("string", "number", "boolean"):
        return v["value"]
    if t in ("null", "undefined"):
        return None
    if t == "array":
        return [_value(x) for x in v.get("value", [])]
    if t == "object":
        return {(k if isinstance(k, str) else _value(k)): _value(x) for k, x in v.get("value", [])}
    return v.get("value")


class Firefox:
    """A headless Firefox (its WebDriver BiDi endpoint), with webdriver.Browser's calls."""

    def __init__(self, binary="/usr/bin/firefox-esr", log=None):
        self.profile = tempfile.mkdtemp(prefix="shale-firefox-")
        self.log_path = log or os.path.join(self.profile, "firefox.log")
        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-remote", "--profile", self.profile,
             "--remote-debugging-port", "0", "--width", "1440", "--height", "1100"],
            stdout=open(self.log_path, "w"), stderr=subprocess.STDOUT,
            env={**os.environ, "MOZ_HEADLESS": "1"})
        deadline = time.time() + 60
        port = None
        while port is None:
            m = re.search(r"WebDriver BiDi listening on ws://127\.0\.0\.1:(\d+)", open(self.log_path).read())
            if m:
                port = int(m.group(1))
            elif time.time() > deadline or self.proc.poll() is not None:
                raise BiDiError("firefox did not start its BiDi endpoint:\n" + open(self.log_path).read()[-2000:])
            else:
                time.sleep(0.2)
        self.ws = _WebSocket("127.0.0.1", port, "/session")
        self.next_id = 0
        self.cmd("session.new", {"capabilities": {}})
        tree = self.cmd("browsingContext.getTree", {})
        self.context = tree["contexts"][0]["context"]

    def cmd(self, method, params):
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") != my_id:
                continue  # an event
            if msg.get("type") == "error" or "error" in msg and msg.get("type") != "success":
                raise BiDiError(f"{method}: {msg.get('error')}: {msg.get('message')}")
            return msg.get("result", {})

    def get(self, url):
        self.cmd("browsingContext.navigate", {"context": self.context, "url": url, "wait": "complete"})

    def js(self, script, *args):
        r = self.cmd("script.callFunction", {
            "functionDeclaration": f"function() {{ {script} }}",
            "arguments": [{"type": "string", "value": a} if isinstance(a, str) else {"type": "number", "value": a}
                          for a in args],
            "target": {"context": self.context}, "awaitPromise": True})
        if r.get("type") == "exception":
            raise BiDiError(f"script failed: {r.get('exceptionDetails', {}).get('text')}")
        return _value(r["result"])

    def wait(self, script, timeout=20, what="a condition"):
        return wait_for(self, script, timeout, what)

    def _element(self, css):
        if not self.js("return !!document.querySelector(arguments[0]);", css):
            raise AssertionError(f"no element {css}")

    def click(self, css):
        self._element(css)
        self.js("document.querySelector(arguments[0]).click();", css)

    def type(self, css, text, clear=True):
        self._element(css)
        self.js("""const el = document.querySelector(arguments[0]);
                   el.focus(); el.value = (arguments[2] === 'clear' ? '' : el.value) + arguments[1];
                   el.dispatchEvent(new Event('input', {bubbles: true}));""",
                css, text, "clear" if clear else "keep")

    def select(self, css, value):
        self._element(css)
        self.js("""const el = document.querySelector(arguments[0]); el.value = arguments[1];
                   el.dispatchEvent(new Event('change', {bubbles: true}));""", css, value)

    def screenshot(self, path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = self.cmd("browsingContext.captureScreenshot", {"context": self.context})["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def quit(self):
        try:
            self.cmd("session.end", {})
        except Exception:
            pass
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()

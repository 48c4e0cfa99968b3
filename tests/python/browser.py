"""A headless Chromium driven over the DevTools protocol, for the HTML report's tests.

Chromium (Debian's `chromium` package) is started with a debugging port of its own choosing; a page
is opened through its HTTP endpoint and driven over that page's WebSocket (websocket-client, from
PyPI). What the page logs as an error, and every exception it throws, is collected, so that a test
can assert that a report rendered cleanly.
"""

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request

try:
    import websocket  # websocket-client
except ImportError:  # the tests skip, or fail where a browser is required (test_html_report.py)
    websocket = None

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome-headless-shell")


def find_chromium():
    """The browser's executable (TRACEPOOL_CHROMIUM, else the first of CANDIDATES on PATH), or None;
    None too without websocket-client, which drives it."""
    if websocket is None:
        return None
    named = os.environ.get("TRACEPOOL_CHROMIUM")
    if named:
        return named
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class BrowserError(Exception):
    pass


class Browser:
    """One headless browser with one page. Use as a context manager."""

    def __init__(self, executable, width=1400, height=1000, timeout=60):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="tracepool-chromium-")
        # Chromium's own output goes to a file: a pipe nobody reads would fill and stall it.
        self.log = open(os.path.join(self.profile, "chromium.log"), "w+")
        self.process = subprocess.Popen(
            [executable, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--hide-scrollbars",
             "--remote-debugging-port=0", "--remote-allow-origins=*", "--user-data-dir=" + self.profile,
             "--window-size=%d,%d" % (width, height), "about:blank"],
            stdout=subprocess.DEVNULL, stderr=self.log)
        port = self._debugging_port()
        self.ws = websocket.create_connection(self._page_socket(port), timeout=timeout, suppress_origin=True)
        self.next_id = 0
        self.events = []
        self.errors = []
        for domain in ("Page", "Runtime", "Log"):
            self.call(domain + ".enable")
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def _debugging_port(self):
        deadline = time.monotonic() + self.timeout
        text = ""
        while time.monotonic() < deadline:
            with open(self.log.name) as f:
                text = f.read()
            found = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", text)
            if found:
                return int(found.group(1))
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.close()
        raise BrowserError("chromium did not start within %d s: %s" % (self.timeout, text[-2000:]))

    def _page_socket(self, port):
        for target in json.load(urllib.request.urlopen("http://127.0.0.1:%d/json/list" % port, timeout=self.timeout)):
            if target.get("type") == "page":
                return target["webSocketDebuggerUrl"]
        raise BrowserError("chromium has no page to drive")

    def _record(self, message):
        self.events.append(message)
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.errors.append("exception: " + details.get("exception", {}).get("description", details.get("text", "")))
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append("console.%s: %s" % (params["type"], " ".join(
                str(a.get("value", a.get("description", ""))) for a in params.get("args", []))))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            self.errors.append("log: " + params["entry"].get("text", ""))

    def call(self, method, **params):
        """Sends one command and returns its result; events that arrive meanwhile are recorded."""
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise BrowserError("%s: %s" % (method, message["error"]))
                return message.get("result", {})
            self._record(message)

    def evaluate(self, expression):
        """The value of a JavaScript expression in the page (awaited if it is a promise)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError("%s: %s" % (expression, result["exceptionDetails"].get("exception", {}).get(
                "description", result["exceptionDetails"].get("text"))))
        return result["result"].get("value")

    def open(self, path):
        """Loads a file and waits until the report says it is drawn (body[data-ready])."""
        self.call("Page.navigate", url="file://" + os.path.abspath(path))
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            try:
                if self.evaluate("document.body && document.body.dataset.ready") == "1":
                    return
            except BrowserError:
                pass  # the page is between documents
            time.sleep(0.02)
        raise BrowserError("%s was not drawn within %d s" % (path, self.timeout))

    def click(self, selector):
        """Clicks the element `selector` names (a CSS selector) as a user would."""
        box = self.evaluate("(() => { const e = document.querySelector(%s); e.scrollIntoView({block: 'center'});"
                            " const r = e.getBoundingClientRect();"
                            " return [r.left + r.width / 2, r.top + r.height / 2]; })()" % json.dumps(selector))
        self.mouse(box[0], box[1])

    def mouse(self, x, y):
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def type_into(self, selector, text):
        self.evaluate("document.querySelector(%s).focus()" % json.dumps(selector))
        self.call("Input.insertText", text=text)

    def screenshot(self, path, full_page=True):
        """Saves a PNG of the page (all of it, with full_page) to `path`."""
        params = {"format": "png"}
        if full_page:
            size = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params.update(captureBeyondViewport=True, clip={"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1})
        data = self.call("Page.captureScreenshot", **params)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        try:
            if getattr(self, "ws", None) is not None:
                self.ws.close()
        finally:
            self.process.kill()
            self.process.wait()
            self.log.close()
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

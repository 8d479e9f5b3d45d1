"""One headless Chromium for many pages: each page loaded in turn into one tab over the DevTools
protocol, its DOM taken after the load event (what `--dump-dom` prints) and everything its console
said (console calls, uncaught exceptions, browser log entries such as a resource that failed to
load). Starting one Chromium per page cost about a CPU-second each; one browser costs that once."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import time
from pathlib import Path

import aiohttp


class ChromiumError(RuntimeError):
    pass


class _Session:
    """The DevTools messages of one WebSocket: calls answered by id, events kept in arrival order."""

    def __init__(self, ws):
        self.ws = ws
        self.ids = itertools.count(1)
        self.events: list[dict] = []

    async def call(self, method: str, session: str | None = None, **params) -> dict:
        msg_id = next(self.ids)
        msg = {"id": msg_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        await self.ws.send_str(json.dumps(msg))
        while True:
            got = await self._next()
            if got.get("id") == msg_id:
                if "error" in got:
                    raise ChromiumError(f"{method}: {got['error']}")
                return got.get("result", {})

    async def until(self, method: str, session: str) -> None:
        """Read messages until event `method` of `session` arrives (earlier ones count too)."""
        seen = 0
        while True:
            for ev in self.events[seen:]:
                if ev.get("method") == method and ev.get("sessionId") == session:
                    self.events.remove(ev)
                    return
            seen = len(self.events)
            await self._next()

    async def _next(self) -> dict:
        msg = await self.ws.receive()
        if msg.type != aiohttp.WSMsgType.TEXT:
            raise ChromiumError(f"DevTools connection ended: {msg.type.name}")
        got = json.loads(msg.data)
        if "method" in got:
            self.events.append(got)
        return got


CONSOLE_EVENTS = ("Runtime.consoleAPICalled", "Runtime.exceptionThrown", "Log.entryAdded")


def _console_text(ev: dict) -> str:
    p = ev["params"]
    if ev["method"] == "Log.entryAdded":
        e = p["entry"]
        return f"{e.get('level')}: {e.get('text')} ({e.get('url', '')})"
    if ev["method"] == "Runtime.exceptionThrown":
        d = p["exceptionDetails"]
        return f"exception: {d.get('exception', {}).get('description') or d.get('text')}"
    return f"console.{p.get('type')}: " + " ".join(str(a.get("value", a.get("description"))) for a in p["args"])


async def _render_all(port: int, path: str, pages: list[Path], timeout: float) -> list[tuple[str, list[str]]]:
    async with aiohttp.ClientSession() as http, http.ws_connect(f"ws://127.0.0.1:{port}{path}",
                                                               max_msg_size=0) as ws:
        cdp = _Session(ws)
        target = (await cdp.call("Target.createTarget", url="about:blank"))["targetId"]
        sid = (await cdp.call("Target.attachToTarget", targetId=target, flatten=True))["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            await cdp.call(f"{domain}.enable", sid)
        out = []
        for page in pages:
            cdp.events.clear()
            nav = await asyncio.wait_for(cdp.call("Page.navigate", sid, url=page.as_uri()), timeout)
            if nav.get("errorText"):
                raise ChromiumError(f"{page}: {nav['errorText']}")
            await asyncio.wait_for(cdp.until("Page.loadEventFired", sid), timeout)
            dom = await cdp.call("Runtime.evaluate", sid, expression="document.documentElement.outerHTML",
                                 returnByValue=True)
            console = [_console_text(ev) for ev in cdp.events
                       if ev.get("sessionId") == sid and ev.get("method") in CONSOLE_EVENTS]
            out.append((dom["result"]["value"], console))
        return out


def render_pages(chromium: str, pages: list[Path], profile: Path, log: Path,
                 timeout: float = 120) -> tuple[list[tuple[str, list[str]]], str]:
    """Per page its (DOM, console messages), and the browser's own log (stderr), from one Chromium."""
    profile.mkdir(parents=True, exist_ok=True)
    active = profile / "DevToolsActivePort"  # Chromium writes its port and browser path there
    active.unlink(missing_ok=True)
    with open(log, "wb") as err:
        proc = subprocess.Popen([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                                 f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
                                 "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
                                 "about:blank"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + timeout
        while not (active.is_file() and len(active.read_text().split()) >= 2):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise ChromiumError(f"Chromium gave no DevTools port (exit {proc.poll()}); see {log}")
            time.sleep(0.05)  # polling for the port file Chromium is writing, not waiting out work
        port, path = active.read_text().split()[:2]
        rendered = asyncio.run(_render_all(int(port), path, pages, timeout))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return rendered, log.read_text(errors="replace")

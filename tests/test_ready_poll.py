"""How soon a launch sees its server ready (toolkit.run.server.Server.wait_ready): a stand-in server that
listens after a set delay and records when it began to listen and when /health_generate was first
answered. The miniature is ready 0.1-0.3 s after its spawn; polled every 0.2 s, each launch waited up
to 0.2 s more (0.1 on average) before its benchmark, hundreds of launches in the tests alone."""

from __future__ import annotations

import sys
import textwrap

from toolkit.run import server as server_mod

STAND_IN = textwrap.dedent("""\
    import os, sys, time
    from http.server import BaseHTTPRequestHandler, HTTPServer

    port = int(sys.argv[sys.argv.index("--port") + 1])
    time.sleep(float(os.environ["STAND_IN_DELAY_S"]))
    marks = os.environ["STAND_IN_MARKS"]

    class Health(BaseHTTPRequestHandler):
        answered = False

        def do_GET(self):
            if not Health.answered:
                Health.answered = True
                with open(marks, "a") as fh:
                    fh.write(f"answered {time.monotonic()}\\n")
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    srv = HTTPServer(("127.0.0.1", port), Health)
    with open(marks, "a") as fh:
        fh.write(f"listening {time.monotonic()}\\n")
    srv.serve_forever()
    """)


def test_a_starting_server_is_asked_every_few_hundredths_then_every_fifth(tmp_path, monkeypatch):
    """The waits between health asks (recorded, not timed: a loaded box's scheduling is no part of the rule):
    READY_POLL_S during the first READY_FINE_S of a launch (the supervisor's POLL_S after); the stand-in
    listens 0.3 s after its start and is seen ready. The old wait was 0.2 s from the start."""
    import time

    pkg = tmp_path / "stand-in" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text(STAND_IN)
    waits = []
    real_sleep = time.sleep
    monkeypatch.setattr(server_mod.time, "sleep", lambda s: (waits.append(s), real_sleep(s)))
    marks = tmp_path / "marks"
    environ = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(pkg.parent), "STAND_IN_DELAY_S": "0.3",
               "STAND_IN_MARKS": str(marks)}
    port = server_mod.free_port()
    srv = server_mod.launch(sys.executable, ["--port", str(port)], host="127.0.0.1", port=port,
                            log=tmp_path / "server.log", environ=environ)
    try:
        ready_s = srv.wait_ready(30)
    finally:
        srv.stop()
    assert ready_s >= 0.3 and "answered" in marks.read_text()
    assert waits and set(waits) == {server_mod.READY_POLL_S}, waits  # ready well within the fine stretch
    assert server_mod.READY_POLL_S <= 0.02 < server_mod.supervisor.POLL_S and server_mod.READY_FINE_S >= 3.0

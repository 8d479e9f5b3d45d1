"""How soon a launch sees its server ready (toolkit.run.server.Server.wait_ready): a stand-in server that
listens after a set delay and records when it began to listen and when /health_generate was first
answered. The miniature is ready 0.1-0.3 s after its spawn; polled every 0.2 s, each launch waited up
to 0.2 s more (0.1 on average) before its benchmark, hundreds of launches in the tests alone."""

from __future__ import annotations

import statistics
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


def test_a_server_that_starts_listening_is_seen_ready_within_a_few_hundredths(tmp_path):
    pkg = tmp_path / "stand-in" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text(STAND_IN)
    lags = []
    for i, delay in enumerate((0.0, 0.05, 0.11, 0.02, 0.08)):  # spread against any fixed poll phase
        marks = tmp_path / f"marks{i}"
        environ = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(pkg.parent), "STAND_IN_DELAY_S": str(delay),
                   "STAND_IN_MARKS": str(marks)}
        port = server_mod.free_port()
        srv = server_mod.launch(sys.executable, ["--port", str(port)], host="127.0.0.1", port=port,
                                log=tmp_path / f"server{i}.log", environ=environ)
        try:
            ready_s = srv.wait_ready(30)
        finally:
            srv.stop()
        seen = dict(line.split() for line in marks.read_text().splitlines())
        lags.append(float(seen["answered"]) - float(seen["listening"]))
        assert ready_s >= delay
    # polled every 0.2 s the lag is spread over 0..0.2 s (median ~0.1); polled finely it is the poll's
    # interval plus this box's scheduling
    assert statistics.median(lags) < 0.05, lags

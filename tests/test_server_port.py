"""A free port taken by another process before the server binds it (seen in CI: two xdist workers
picked the same port; the slow real sglang was still loading while the miniature answered there, and
only /server_info's check caught it): readiness counts only an answer from the server's own process
tree, and `run` launches again on another port."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading

import pytest

from toolkit.run import server as srv


class _Healthy(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.fixture
def impostor():
    """An HTTP server in this test's process (not the launched server's tree) answering 200 everywhere."""
    httpd = http.server.HTTPServer(("127.0.0.1", 0), _Healthy)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_an_answer_from_another_process_on_the_port_is_not_ready(impostor, tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # still "loading"
    server = srv.Server(argv=[], host="127.0.0.1", port=impostor, log=tmp_path / "server.log", proc=proc)
    (tmp_path / "server.log").write_text("")
    try:
        with pytest.raises(srv.PortTaken) as exc:
            server.wait_ready(30)
        assert f"port {impostor} on 127.0.0.1 answered from another process (pid {os.getpid()}" in exc.value.message
    finally:
        proc.kill()
        proc.wait()


def test_a_slow_loading_server_is_waited_for_without_scanning_the_box_every_poll(tmp_path, monkeypatch):
    """Real sglang loads for 1-12 minutes; readiness polls every 0.2 s, but looks for the server's
    descendants (psutil reads every process on the box) only while its tree changes, then less and
    less often: a helper it started is still remembered (stop ends it)."""
    port = srv.free_port("127.0.0.1")
    code = ("import http.server, subprocess, sys, time\n"
            "helper = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "open(sys.argv[2], 'w').write(str(helper.pid))\n"
            "time.sleep(5)\n"
            "class H(http.server.BaseHTTPRequestHandler):\n"
            "    def do_GET(self):\n        self.send_response(200); self.end_headers(); self.wfile.write(b'ok')\n"
            "    def log_message(self, *a): pass\n"
            "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n")
    log = tmp_path / "server.log"
    proc = srv.supervisor.spawn([sys.executable, "-c", code, str(port), str(tmp_path / "helper.pid")], log=log,
                                environ=dict(os.environ))
    server = srv.Server(argv=[], host="127.0.0.1", port=port, log=log, proc=proc)
    scans = []
    remember = srv.Server._remember_children
    monkeypatch.setattr(srv.Server, "_remember_children", lambda self: scans.append(1) or remember(self))
    try:
        assert 5 <= server.wait_ready(60) < 60
        assert int((tmp_path / "helper.pid").read_text()) in server._descendants
        assert len(scans) <= 10, f"{len(scans)} scans of every process in ~5 s of loading"
    finally:
        server.stop(grace=5)


@pytest.mark.parametrize("argv, pick", [
    pytest.param(["run", "demo/baseline", "--repeats", "1"], 1, id="run"),
    # profile's server is a torch env (the miniature's profiler records a torch trace)
    pytest.param(["profile", "demo/torch-baseline", "--steps", "4"], 1, id="profile", marks=pytest.mark.slow),
])
def test_a_launch_goes_again_on_another_port_when_its_pick_was_taken(argv, pick, impostor, tmp_path, home,
                                                                      monkeypatch, capsys):
    """`run` and `profile` share one launch: the impostor took the port patchbench picked after it was
    found free; the server is launched again on another port, verified, and its run records that port."""
    from conftest import demo_project
    from toolkit.cli import main
    from toolkit.results.store import Store

    demo_project(tmp_path, monkeypatch)
    real_free, real_check = srv.free_port, srv.check_bindable
    picks = iter([0] * (pick - 1) + [impostor])  # 0: a real free port
    monkeypatch.setattr(srv, "free_port", lambda host="127.0.0.1": next(picks, None) or real_free(host))
    monkeypatch.setattr(srv, "check_bindable", lambda host, port: None if port == impostor else real_check(host, port))
    assert main(argv) == 0
    said = capsys.readouterr()
    assert f"port {impostor} on 127.0.0.1 answered from another process" in " ".join((said.out + said.err).split())
    (run,) = Store(home / "results.sqlite").runs()
    assert run.status == "ok" and run.config_verified
    assert int(run.server_argv[run.server_argv.index("--port") + 1]) != impostor

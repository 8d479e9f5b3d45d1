"""A recipe that uses sglang's `--config FILE` (its YAML server-args file): the file's options are the
recipe's server arguments, checked statically, verified at /server_info, part of the run identity; a file
sglang would refuse is refused before anything runs (toolkit/recipe/server_config.py)."""

from __future__ import annotations

from conftest import demo_project
from toolkit.cli import main
from toolkit.results.store import Store


def test_a_config_file_is_read_into_the_server_args(home, tmp_path, monkeypatch, capsys):
    proj = demo_project(tmp_path, monkeypatch)
    demo = proj / "recipes" / "demo"
    (demo / "server.yaml").write_text("max-running-requests: 6\nchunked_prefill_size: 512\nskip-server-warmup: true\n")
    (demo / "yaml.toml").write_text('extends = "demo/baseline"\n[server.args]\nconfig = "server.yaml"\n'
                                    'chunked-prefill-size = 1024\n')
    (demo / "yamlexpect.toml").write_text('extends = "demo/yaml"\n[expect]\nmax_running_requests = 6\n')
    assert main(["run", "demo/yamlexpect", "--until", "check"]) == 0, capsys.readouterr().err  # the file's 6
    capsys.readouterr()
    assert main(["show", "demo/yaml", "--json"]) == 0  # each option with the file it came from
    values = __import__("json").loads(capsys.readouterr().out)["values"]
    assert values["server.args.max-running-requests"] == {"value": 6, "file": str(demo / "server.yaml")}
    assert values["server.args.chunked-prefill-size"]["value"] == 1024  # the recipe's own, not the file's 512
    assert main(["run", "demo/yaml", "--until", "verify"]) == 0, capsys.readouterr().err
    store = Store(home / "results.sqlite")
    [run] = store.runs(recipe="demo/yaml")
    argv = run.server_argv
    assert "--config" not in argv and argv[argv.index("--max-running-requests") + 1] == "6", argv
    assert "--skip-server-warmup" in argv
    # the server runs what the file says; the recipe's own argument wins, as sglang's command line does
    assert run.server_info["max_running_requests"] == 6 and run.server_info["chunked_prefill_size"] == 1024
    assert run.status == "ok" and run.config_verified, (run.status, run.error)

    # an edited file is another configuration, not more launches of the same one
    (demo / "server.yaml").write_text("max-running-requests: 5\n")
    assert main(["run", "demo/yaml", "--until", "verify"]) == 0, capsys.readouterr().err
    first, second = store.runs(recipe="demo/yaml")
    assert second.server_info["max_running_requests"] == 5 and second.identity != first.identity
    capsys.readouterr()
    assert main(["run", "demo/yamlexpect", "--until", "check"]) == 2  # [expect] max_running_requests = 6 no longer holds
    err = " ".join(capsys.readouterr().err.split())
    assert "max_running_requests" in err, err


def test_a_config_file_sglang_would_refuse_is_refused_before_anything_runs(home, tmp_path, monkeypatch, capsys):
    proj = demo_project(tmp_path, monkeypatch)
    demo = proj / "recipes" / "demo"
    (demo / "server.json").write_text('{"max-running-requests": 6}\n')
    (demo / "list.yaml").write_text("- max-running-requests\n")
    for name, value, says in (("json", "server.json", "is not a .yaml/.yml file"),
                              ("missing", "absent.yaml", "cannot read"),
                              ("list", "list.yaml", "must hold a mapping of option -> value")):
        (demo / f"{name}.toml").write_text(f'extends = "demo/baseline"\n[server.args]\nconfig = "{value}"\n')
        assert main(["run", f"demo/{name}", "--until", "check"]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert says in err and f"{name}.toml: `server.args.config`" in err and "Traceback" not in err, err

"""`patchbench publish` into the directory of an earlier publish: the pages and plots it wrote for
what the store no longer holds go, and nothing it did not write (or that was changed since) does."""

from __future__ import annotations

from conftest import cli_json, demo_project
from toolkit.cli import main

SMALL = ('[benchmark]\ninput_len = 16\noutput_len = 8\nconcurrency = [1]\nnum_prompts = 3\nwarmup = 1\n'
         '[quality]\nlaunches = 0\n')


def test_publish_removes_the_pages_it_wrote_for_a_pair_that_no_longer_exists_and_nothing_else(
        home, tmp_path, monkeypatch, capsys):
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes" / "t").mkdir()
    (proj / "recipes" / "t" / "base.toml").write_text('extends = "../demo/baseline.toml"\n' + SMALL)
    (proj / "recipes" / "t" / "fast.toml").write_text('extends = "../demo/fast.toml"\ncompare_to = "t/base"\n' + SMALL)
    assert main(["run", "t/base", "t/fast", "--fixed", "--repeats", "2"]) == 0
    site = tmp_path / "site"
    rc, first = cli_json(capsys, ["publish", "-o", str(site)])
    assert rc == 0
    gone = [p for p in first["pages"] if "fast" in p]  # the pair's compare page and t/fast's own page
    assert len(gone) == 2 and all((site / p).is_file() for p in gone), first["pages"]
    mine = [site / "notes.txt", site / "compare" / "my-notes.html"]  # the user's own files in the site
    for p in mine:
        p.write_text("kept\n")
    edited = site / next(p for p in gone if p.startswith("recipes/"))  # t/fast's page, changed since it was written
    edited.write_text("edited by hand\n")

    # another store: t/base's runs only (as a store pruned or filled from a partial export)
    export = tmp_path / "base.json"
    assert main(["results", "t/base", "--export", "json", "-o", str(export)]) == 0
    other = tmp_path / "other.sqlite"
    assert main(["import", str(export), "--store", str(other)]) == 0
    rc, second = cli_json(capsys, ["publish", "-o", str(site), "--store", str(other), "--imported"])
    assert rc == 0
    assert [p for p in gone if (site / p).exists()] == [edited.relative_to(site).as_posix()]  # the compare page went
    assert any(n.startswith("removed 1 file(s) an earlier publish wrote") for n in second["notes"]), second["notes"]
    assert all(p.read_text() == "kept\n" for p in mine)  # never a file publish did not write
    assert edited.read_text() == "edited by hand\n"  # nor one changed since it wrote it
    assert all((site / p).is_file() for p in second["pages"])
    assert (site / "index.html").is_file() and "t/fast" not in (site / "index.html").read_text()

"""A verdict's kept files (toolkit/results/artifacts.vouch): the answers are read only from bytes with
the stored sha256, the kept copy first, else the run's own directory holding the same bytes; every
missing or altered answers file or GPU series is one line naming the run and the file."""

from __future__ import annotations

import json

from toolkit.results.artifacts import keep, vouch
from toolkit.results.store import Store


def _run(store, tmp_path, recipe: str, answers: dict, gpu: bool = False):
    run_dir = tmp_path / "runs" / recipe
    run_dir.mkdir(parents=True)
    (run_dir / "quality.json").write_text(json.dumps(answers))
    if gpu:
        (run_dir / "gpu_state.json").write_text('{"available": true, "ticks": []}')
    rid = store.record_run({"recipe": recipe, "extra": {"quality": {"status": "ok",
                                                                    "artifact": str(run_dir / "quality.json")}}})
    keep(store, rid, run_dir, tmp_path / "shared")
    return store.get_run(rid), run_dir


def test_answers_come_from_bytes_with_the_stored_sha256(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    a, a_dir = _run(store, tmp_path, "a", {"points": {"1": []}}, gpu=True)
    b, b_dir = _run(store, tmp_path, "b", {"points": {"1": []}})
    plain = store.get_run(store.record_run({"recipe": "c", "extra": {"quality": {"artifact": "/elsewhere/q.json"}}}))
    shared = tmp_path / "shared"

    runs, lines = vouch(store, [a, b, plain])
    assert lines == [] and [r.extra["quality"]["artifact"] for r in runs] == [
        str(shared / a.run_id / "quality.json"), str(shared / b.run_id / "quality.json"), "/elsewhere/q.json"]

    # a's kept copy altered, its run directory intact: read from there; b's gone with its directory
    (shared / a.run_id / "quality.json").write_text('{"points": {"1": [{"ids": [1]}]}}')
    (shared / a.run_id / "gpu_state.json").unlink()
    (shared / b.run_id / "quality.json").unlink()
    (b_dir / "quality.json").unlink()
    runs, lines = vouch(store, [a, b, plain])
    assert [r.extra["quality"]["artifact"] for r in runs] == [str(a_dir / "quality.json"), None, "/elsewhere/q.json"]
    assert sorted(lines) == sorted([
        f"artifact: run {a.run_id[:8]} (a): quality.json altered ({shared / a.run_id / 'quality.json'}, sha256 not "
        f"the stored one): its answers read from {a_dir / 'quality.json'} (the stored sha256)",
        f"artifact: run {a.run_id[:8]} (a): gpu_state.json missing ({shared / a.run_id / 'gpu_state.json'}): "
        "the box flags are its stored summary's",
        f"artifact: run {b.run_id[:8]} (b): quality.json missing ({shared / b.run_id / 'quality.json'}): "
        "its answers not used"])

    # an earlier launch answering for a run (answers_from) is held to its own record the same way
    c = store.get_run(store.record_run({"recipe": "b", "extra": {"quality": {
        "status": "skipped", "answers_from": [[b.run_id, str(b_dir / "quality.json"), b.started_at]]}}}))
    (runs_c,), lines = vouch(store, [c])
    assert runs_c.extra["quality"]["answers_from"] == [[b.run_id, None, b.started_at]]
    assert lines == [f"artifact: run {b.run_id[:8]}: quality.json missing ({shared / b.run_id / 'quality.json'}): "
                     "its answers not used"]


def test_a_kept_file_is_hashed_once_per_process_and_again_after_any_write(tmp_path, monkeypatch):
    """Verdicts read the same runs at every look: the kept files' sha256 is remembered while the
    file is untouched, and a same-size rewrite (new ctime) is hashed again and seen as different."""
    import hashlib

    from toolkit.results import artifacts

    f = tmp_path / "quality.json"
    f.write_bytes(b'{"a": 1}')
    calls = []
    real = hashlib.sha256
    monkeypatch.setattr(artifacts.hashlib, "sha256", lambda *a: calls.append(1) or real(*a))
    first = artifacts.sha256_of(f)
    assert [artifacts.sha256_of(f) for _ in range(5)] == [first] * 5 and len(calls) == 1
    f.write_bytes(b'{"a": 2}')  # same size
    assert artifacts.sha256_of(f) == real(b'{"a": 2}').hexdigest() != first and len(calls) == 2

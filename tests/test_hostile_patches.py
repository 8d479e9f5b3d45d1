"""Hostile or malformed patches are refused before anything is written: one line each, exit 2."""

from __future__ import annotations

import pytest

from toolkit.cli import main

HEADER = """
[sources.mini]
git = "@UPSTREAM@"
rev = "v1"
package_dir = "python"
[patches]
mini = ["evil.patch"]
"""

HOSTILE = {
    "path escape": ("diff --git a/../evil.py b/../evil.py\nnew file mode 100644\n--- /dev/null\n+++ b/../evil.py\n@@ -0,0 +1 @@\n+x\n", "escapes the tree"),
    "absolute path": ("--- /dev/null\n+++ /tmp/evil.py\n@@ -0,0 +1 @@\n+x\n", "absolute path"),
    "dot git": ("diff --git a/.git/hooks/post-commit b/.git/hooks/post-commit\nnew file mode 100755\n--- /dev/null\n+++ b/.git/hooks/post-commit\n@@ -0,0 +1 @@\n+x\n", "writes into .git/"),
    "symlink": ("diff --git a/python/link b/python/link\nnew file mode 120000\n--- /dev/null\n+++ b/python/link\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n", "symbolic link"),
    "binary": ("diff --git a/python/x.bin b/python/x.bin\nnew file mode 100644\nindex 0000000..e69de29\nGIT binary patch\nliteral 3\nKcmZ?wWB>vH00000\n\nliteral 0\nHcmV?d00001\n\n", "binary"),
    "empty": ("", "empty"),
    "not a diff": ("this is just some text\nwith no diff in it\n", "not a diff"),
    "crlf": ("diff --git a/python/mini/cost.py b/python/mini/cost.py\r\n--- a/python/mini/cost.py\r\n+++ b/python/mini/cost.py\r\n@@ -1 +1 @@\r\n-STEP_MS = 10\r\n+STEP_MS = 8\r\n", "CRLF"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_patch_refused(project, home, tmp_path, capsys, case):
    text, needle = HOSTILE[case]
    (project.patches / "evil.patch").write_bytes(text.encode())
    path = project.recipe("evil", HEADER)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["apply", str(path)]) == 2
    err = capsys.readouterr().err
    assert needle in err and "evil.patch" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not (home / "trees").exists() or not any((home / "trees").glob("mini-*"))
    assert not (tmp_path / "evil.py").exists() and not (project.root.parent / "evil.py").exists()

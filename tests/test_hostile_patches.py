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
    # a hunk shorter than its header says: the line of its header and the counts
    "short hunk": ("--- a/python/mini/cost.py\n+++ b/python/mini/cost.py\n@@ -1,3 +1,3 @@\n-STEP_MS = 12\n+STEP_MS = 8\n"
                   " PREFILL_MS = 1\n", "line 3: @@ -1,3 +1,3 @@ has 2 old and 2 new lines for 3 and 3"),
    # git's C-quoted names: `\\057` is `/`, so this is `../evil.py`
    "quoted path escape": ('diff --git "a/..\\057evil.py" "b/..\\057evil.py"\nnew file mode 100644\n--- /dev/null\n'
                           '+++ "b/..\\057evil.py"\n@@ -0,0 +1 @@\n+x\n', "escapes the tree (`..`)"),
    "rename escape": ("diff --git a/python/mini/cost.py b/python/mini/new.py\nsimilarity index 100%\n"
                      "rename from python/mini/cost.py\nrename to ../../evil.py\n", "escapes the tree"),
    "quoted rename escape": ('diff --git a/python/mini/cost.py "b/python/..\\057..\\057evil.py"\nsimilarity index 100%\n'
                             'rename from python/mini/cost.py\nrename to "python/..\\057..\\057evil.py"\n', "escapes the tree"),
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
    assert not _published_trees(home)
    assert not (tmp_path / "evil.py").exists() and not (project.root.parent / "evil.py").exists()


def _published_trees(home) -> list:
    return [p for p in (home / "trees").glob("mini-*") if p.is_dir()] if (home / "trees").exists() else []


CRLF_PATCH = ("diff --git a/python/mini/cost.py b/python/mini/cost.py\r\n--- a/python/mini/cost.py\r\n"
              "+++ b/python/mini/cost.py\r\n@@ -1,3 +1,3 @@\r\n-STEP_MS = 10\r\n+STEP_MS = 8\r\n"
              " PREFILL_MS = 1\r\n NAME = 'mini'\r\n")


def test_crlf_patch_on_lf_file_refused_with_dos2unix_hint(project, home, capsys):
    """A CRLF patch for an LF file: exit 2, one line naming the patch, the file and the fix."""
    (project.patches / "evil.patch").write_bytes(CRLF_PATCH.encode())
    path = project.recipe("evil", HEADER)
    assert main(["apply", str(path)]) == 2
    err = capsys.readouterr().err
    assert "evil.patch" in err and "CRLF" in err and "python/mini/cost.py has LF" in err and "dos2unix" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not _published_trees(home)


def test_crlf_patch_applies_to_crlf_file(project, home, capsys):
    """A file with CRLF endings takes a patch with CRLF endings, byte for byte."""
    project.write_upstream("python/mini/cost.py", "STEP_MS = 10\r\nPREFILL_MS = 1\r\nNAME = 'mini'\r\n")
    project.commit("cost.py with CRLF line endings")
    (project.patches / "evil.patch").write_bytes(CRLF_PATCH.encode())
    path = project.recipe("evil", HEADER.replace('rev = "v1"', 'rev = "main"'))
    assert main(["apply", str(path)]) == 0, capsys.readouterr().err
    [tree] = _published_trees(home)
    assert (tree / "python/mini/cost.py").read_bytes() == b"STEP_MS = 8\r\nPREFILL_MS = 1\r\nNAME = 'mini'\r\n"


def test_lf_patch_on_crlf_file_names_the_line_endings(project, home, capsys):
    project.write_upstream("python/mini/cost.py", "STEP_MS = 10\r\nPREFILL_MS = 1\r\nNAME = 'mini'\r\n")
    project.commit("cost.py with CRLF line endings")
    (project.patches / "evil.patch").write_bytes(CRLF_PATCH.replace("\r\n", "\n").encode())
    path = project.recipe("evil", HEADER.replace('rev = "v1"', 'rev = "main"'))
    assert main(["apply", str(path)]) == 2
    err = capsys.readouterr().err
    assert "the patch has LF line endings, python/mini/cost.py has CRLF" in err and "unix2dos" in err

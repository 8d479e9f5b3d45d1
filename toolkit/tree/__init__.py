"""Stage 2, recipe -> tree: sources fetched and patched into git trees, one commit per patch.

    gitrepo        the only module that runs git (GitPython); fixed identity and dates
    package_index  a package index's files and releases (PyPI JSON, local PEP 503 / find-links dirs)
    sources        git / path / pypi -> base git repo (mirrors, sha256-checked downloads, layouts)
    patches        parse (unidiff), safety, zero-fuzz check, apply one commit per patch, hints
    applied        AppliedTree and how it is materialised (content-keyed, cached bases for checks)
    lock           the lock file beside the recipe (NAME.lock.json), --frozen; portable paths
    stack          the patch author's loop: `patches edit` (work tree) and `patches export`
    rebase         `patches rebase`: the stack cherry-picked onto another base, conflicts reported

May import: toolkit.recipe and the shared modules (errors, digest, workspace, resources).
"""

"""The docs site is the repository's own documents, laid out as they are in the repository, plus the rule pages.

Each page keeps its repository path (``docs/faults.md``, ``reports/gpu/bench.md``, ``CONTRACT.md``; README.md is
the home page), so a relative link means the same file on the site as on a repository browser, and ``mkdocs build
--strict`` fails on a link that is broken in either. Every file git tracks is part of the
site, the sources included, so that a link to a module or a benchmark script resolves too. The rule reference
(``docs/rules/<family>.md``) is rendered here from ``contract/`` and ``zoo/`` by the same code as
``rmsnorm-conformance explain``, so it cannot drift from either.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]


def _repository_files() -> list[str]:
    """The files git tracks, as repository-relative POSIX paths, symbolic links left out. Tracked only: CI builds the
    site beside the tests, whose outputs must not become pages (a new page appears once it is added to git)."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT,
                                capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SystemExit(f"the docs are built from a git checkout of the repository: git ls-files failed in {ROOT}: "
                         f"{exc}") from None
    return sorted(p for p in set(listed.split("\0")) if p and (ROOT / p).is_file() and not (ROOT / p).is_symlink()
                  and p != "docs/hooks.py")


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Replace the docs folder's files by the repository's, each at its repository path, and the rule pages."""
    from rmsnorm_conformance.explain import family_pages

    docs_dir = Path(config.docs_dir).resolve()
    # The theme's own files (added before this hook runs) stay; the docs folder's come back at their repository paths.
    site = Files([f for f in files
                  if f.abs_src_path is None or not Path(f.abs_src_path).resolve().is_relative_to(docs_dir)])
    for path in _repository_files():
        site.append(File(path, str(ROOT), config.site_dir, config.use_directory_urls))
    for name, text in family_pages().items():
        site.append(File.generated(config, f"docs/rules/{name}.md", content=text))
    return site

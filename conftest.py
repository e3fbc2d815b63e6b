"""Runs from the repository root need nothing here: the installed package's ``pytest11`` entry point loads the
plugin (``pip install -e .``), exactly as it does for a kernel author's repository."""

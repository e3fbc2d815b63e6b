"""Load the conformance plugin for runs from the repository root (`pytest suites`, `pytest tests`)."""

pytest_plugins = ("harness.plugin",)

"""The conformance harness: backends and their registry, strategies, comparison, report, pytest plugin."""

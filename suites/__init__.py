"""The conformance suites: the tests that any backend is held to, one module per chapter of CONTRACT.md.

Run them from anywhere with ``pytest --pyargs rmsnorm_conformance.suites --backend=SPEC``.
"""

"""Checking: the subject under test, the assertion helpers and the ``conformance`` decorator, comparisons that
return verdicts with statistics, rounding classes, known failures and the rule-to-test index.
"""

"""The contract's rules, one module per family; each module's ``RULES`` lists its family in CONTRACT.md's order.

One record per rule: its id, title, statement and severity, read by the suites (``@conformance(RULE.id, ...)``),
the zoo's planted defects (``breaks = RULE.id``), the reports and CONTRACT.md. docs/adding-a-rule.md says how to
add one.
"""

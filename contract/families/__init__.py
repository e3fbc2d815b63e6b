"""The contract's rules, one module per family; each module's ``RULES`` lists its family in CONTRACT.md's order."""

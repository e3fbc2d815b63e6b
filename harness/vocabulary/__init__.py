"""The words every stage shares, below them all: the records a run's checks leave (``records``) and the names of
the entry points a backend is called through (``entry_point_names``). Nothing here imports a stage, so drawing,
running, checking, reporting and the plugin each import these without importing one another against the flow.
"""

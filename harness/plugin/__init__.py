"""The pytest plugin: options, fixtures and hooks (``hooks``, loaded through ``pytest11``), the run's resolved
settings and its report writer (``session``), and the parity gate's option parsing.
"""

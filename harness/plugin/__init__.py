"""The pytest plugin: options, fixtures and hooks (``hooks``, loaded through ``pytest11``); the resolved options
(``options``), pytest-xdist's controller (``controller``), the controller's reporter (``reporter``), how test
reports become records (``outcomes``), replay commands (``replay_commands``), the parity gate's option parsing
(``parity_gate``) and how an xdist worker ends (``worker_exit``).
"""

from . import worker_exit
from .rewrite import rewrite_only_the_suites

# pytest imports this package for the plugin's entry point before any other module of it: narrow its assertion
# rewriting to the suites now, so that the harness's modules load as the bytecode pip wrote (rewrite.py says why).
rewrite_only_the_suites()
# An xdist worker's exit handler, registered before torch is imported so that it runs after torch's (worker_exit.py).
worker_exit.arm()

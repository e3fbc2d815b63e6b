"""The pytest plugin: options, fixtures and hooks (``hooks``, loaded through ``pytest11``); the resolved options
(``options``), the controller's reporter (``reporter``), how test reports become records (``outcomes``), replay
commands (``replay_commands``) and the parity gate's option parsing (``parity_gate``).
"""

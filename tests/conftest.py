"""The harness's own tests: `pytester` drives the plugin end to end in subprocesses."""

pytest_plugins = ("pytester",)

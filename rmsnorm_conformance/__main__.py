"""``rmsnorm-conformance`` (or ``python -m rmsnorm_conformance``): the harness's command-line tools.

    rmsnorm-conformance merge A.json B.json [--bench bench.json] [--out matrix.md]
    rmsnorm-conformance contract [--write | --check] [CONTRACT.md]
    rmsnorm-conformance explain RULE
    rmsnorm-conformance fingerprint --backend=X [--dim=4096] [--rows=1,257] [--dtype=bfloat16]
    rmsnorm-conformance --version
"""

from __future__ import annotations

import os
import sys

COMMANDS = {
    "merge": "merge the JSON reports of several runs into one conformance matrix",
    "contract": "print the contract (CONTRACT.md); --write or --check a CONTRACT.md's tables against contract/",
    "explain": "what a rule says, what breaks it, a planted defect that shows it, how to replay a breach",
    "fingerprint": "reveal a backend's reduction orders at one or two batch sizes, beside the canonical order",
}


def version() -> str:
    """The package's version and the contract's it implements."""
    from . import CONTRACT_VERSION, __version__

    return f"rmsnorm-conformance {__version__} (contract {CONTRACT_VERSION})"


def main(argv: list[str] | None = None) -> int:
    try:
        return _run(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:  # `rmsnorm-conformance contract | head`: the reader had enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that the exit's flush cannot fail
        return 0


def _run(args: list[str]) -> int:
    if args[:1] in (["--version"], ["-V"]):
        print(version())
        return 0
    if not args or args[0] not in COMMANDS:
        # Asked for help: the usage on stdout, exit 0. No command or an unknown one: a usage error, exit 2.
        helped = bool(args) and args[0] in ("-h", "--help")
        out = sys.stdout if helped else sys.stderr
        if args and not helped:
            print(f"rmsnorm-conformance: unknown command {args[0]!r}", file=out)
        print(__doc__.strip(), file=out)
        for name, what in COMMANDS.items():
            print(f"  {name}: {what}", file=out)
        return 0 if helped else 2
    command, rest = args[0], args[1:]
    if command == "merge":
        from .harness.reporting.merge import main as merge_main

        return merge_main(rest)
    if command == "fingerprint":
        from .harness.reporting.fingerprint_command import main as fingerprint_main

        return fingerprint_main(rest)
    if command == "explain":
        from .explain import main as explain_main

        return explain_main(rest)
    from .contract.render import main as contract_main

    return contract_main(rest)


if __name__ == "__main__":
    sys.exit(main())

"""``rmsnorm-conformance`` (or ``python -m rmsnorm_conformance``): the harness's command-line tools.

    rmsnorm-conformance merge A.json B.json [--bench bench.json] [--out matrix.md]
    rmsnorm-conformance contract [CONTRACT.md] [--check]
    rmsnorm-conformance fingerprint --backend=X [--dim=4096] [--rows=1,257] [--dtype=bfloat16]
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    commands = {"merge": "merge the JSON reports of several runs into one conformance matrix",
                "contract": "render CONTRACT.md's tables from the contract, or --check that they match",
                "fingerprint": "reveal a backend's reduction orders at one or two batch sizes, beside the canonical"}
    if not args or args[0] not in commands:
        # Asked for help: the usage on stdout, exit 0. No command or an unknown one: a usage error, exit 2.
        helped = bool(args) and args[0] in ("-h", "--help")
        out = sys.stdout if helped else sys.stderr
        if args and not helped:
            print(f"rmsnorm-conformance: unknown command {args[0]!r}", file=out)
        print(__doc__.strip(), file=out)
        for name, what in commands.items():
            print(f"  {name}: {what}", file=out)
        return 0 if helped else 2
    command, rest = args[0], args[1:]
    if command == "merge":
        from .harness.reporting.merge import main as merge_main

        return merge_main(rest)
    if command == "fingerprint":
        from .harness.reporting.fingerprint_command import main as fingerprint_main

        return fingerprint_main(rest)
    from .contract.render import main as contract_main

    return contract_main(rest)


if __name__ == "__main__":
    sys.exit(main())

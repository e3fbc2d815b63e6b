#!/usr/bin/env bash
# The steps of ci.yml, kept here so that the workflow and a local run (and the harness's own test of this example)
# run the same commands. Run from the kernel package's directory:
#
#   HARNESS=path/to/rmsnorm-conformance bash ci/gate.sh install   # torch, the harness's wheel, this package
#   bash ci/gate.sh gate                                          # the conformance gate; exit status 1 on a breach
#
# HARNESS is a clone of the harness's repository (its wheel is built here, as a user can), a wheel, or a pip
# requirement such as "rmsnorm-conformance @ git+https://github.com/OWNER/REPO@REF".
# TORCH_INSTALL is what pip installs first (default: the CPU build; empty: keep the torch already installed).
# PIP_FLAGS are added to every pip install (e.g. --no-index for an offline run); GATE_ARGS to the gate's pytest.
# GATE_DEADLINE (seconds, default 1500: below the job's 30-minute timeout, so the report is written before the job is
# killed) and GATE_WORKERS (pytest-xdist's -n, default auto; 0: one process) are the gate's --deadline and -n.
set -euo pipefail

install() {
    local torch_install="${TORCH_INSTALL-torch --index-url https://download.pytorch.org/whl/cpu}"
    # torch first: the harness leaves torch's version open, and pip's default on Linux is a multi-GB CUDA build.
    if [ -n "$torch_install" ]; then
        # shellcheck disable=SC2086  # the words are pip's arguments
        python -m pip install ${PIP_FLAGS:-} $torch_install
    fi
    local harness="${HARNESS:?set HARNESS to the harness: a clone of its repository, a wheel, or a pip requirement}"
    if [ -d "$harness" ]; then
        local wheelhouse
        wheelhouse="$(mktemp -d)"
        # shellcheck disable=SC2086
        python -m pip wheel ${PIP_FLAGS:-} --no-deps -w "$wheelhouse" "$harness"
        harness="$(ls "$wheelhouse"/rmsnorm_conformance-*.whl)"
    fi
    # shellcheck disable=SC2086
    python -m pip install ${PIP_FLAGS:-} "$harness" .
}

gate() {
    # The report files are the job's artifact; the harness also appends a summary to $GITHUB_STEP_SUMMARY and, under
    # GitHub Actions, prints each breach as an annotation on the kernel's source.
    # shellcheck disable=SC2086
    python -m pytest --pyargs rmsnorm_conformance.suites --backend=my_rmsnorm \
        --deadline="${GATE_DEADLINE:-1500}" -n "${GATE_WORKERS:-auto}" \
        --report=conformance.md --report=conformance.json --junitxml=conformance.xml ${GATE_ARGS:-}
}

case "${1:-}" in
    install) install ;;
    gate) gate ;;
    *) echo "usage: bash ci/gate.sh install|gate" >&2; exit 2 ;;
esac

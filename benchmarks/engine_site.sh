# Sourced by the engine scripts on a GPU machine with no network (engines_on_device.sh, fingerprints_on_device.sh):
# keep the engine wheels that travelled with this call, join split wheels whose parts have all arrived, and install
# them into one site directory that Python then reads. benchmarks/engine_wheels.py packs the wheels into groups
# (.whl-engines/<group>/), a wheel too large for one call split into NAME.part-N files with NAME.sha256 beside each.
#
# Calls on one machine share /tmp while it stays warm: `engine_stage` each group in back-to-back calls, and
# `engine_install` in the last. A wheel joins once all its parts are there and its sha256 matches; an incomplete
# one is left out and named, and its adapters are then skipped with their reason like any whose package is missing.
STAGE=${ENGINES_STAGE:-/tmp/engines-stage}
SITE=${ENGINES_SITE:-/tmp/site}

engine_stage() {  # keep this call's files: whole wheels, parts and checksums
  mkdir -p "$STAGE"
  find -L .whl-engines -type f 2>/dev/null | while read -r f; do
    [ -e "$STAGE/$(basename "$f")" ] || cp "$f" "$STAGE/"
  done
  echo "staged: $(ls "$STAGE" | wc -l) files, $(du -sh "$STAGE" | cut -f1)"
}

engine_install() {  # join, install into $SITE, make every Python process read it; then this tree as a wheel
  local sum wheel start purelib
  for sum in "$STAGE"/*.sha256; do
    [ -e "$sum" ] || continue
    wheel="$STAGE/$(basename "$sum" .sha256)"
    [ -e "$wheel" ] && continue
    cat $(ls "$wheel".part-* | sort -V) > "$wheel.joined" 2>/dev/null
    if (cd "$STAGE" && sed "s/  .*/  $(basename "$wheel").joined/" "$(basename "$sum")" | sha256sum -c --quiet -); then
      mv "$wheel.joined" "$wheel"; echo "joined $(basename "$wheel")"
    else
      rm -f "$wheel.joined"; echo "incomplete, left out: $(basename "$wheel") (parts: $(ls "$wheel".part-* 2>/dev/null | wc -l))"
    fi
  done
  start=$(date +%s)
  # One site directory, so that the wheels' .pth files (nvidia-cutlass-dsl's) run.
  if ls "$STAGE"/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
      "$STAGE"/*.whl || echo "pip install failed: exit $?"
  fi
  export PATH="$SITE/bin:$PATH"   # console scripts carried in wheels (ninja, for FlashInfer's CUDA JIT fallback)
  purelib=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "import site; site.addsitedir('$SITE')" > "$purelib/zz_engines_site.pth" \
    || { export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"; echo "no .pth written: PYTHONPATH only"; }
  # The harness itself, with its entry points (the adapters are registered there), from a wheel of this tree: the
  # runs then start in an empty folder, where this tree's rmsnorm_conformance/ cannot shadow the package.
  rm -rf /tmp/harness-whl
  python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/harness-whl . \
    && python3 -m pip install -q --no-deps --no-index --force-reinstall /tmp/harness-whl/*.whl \
    || echo "harness install failed: exit $?"
  echo "install: $(( $(date +%s) - start )) s"
}

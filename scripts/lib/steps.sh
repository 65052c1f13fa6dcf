# Timed steps for scripts/test and scripts/soak (sourced). `step NAME TEXT` ends the step before
# and starts NAME; `in_background NAME CMD...` runs a step beside the others, and
# `join_background NAME` waits for it (its output is shown then, and a failure fails the run);
# `steps_table STATUS` prints seconds per step as a markdown table, the failed step marked, and
# writes it to $logs/steps.md.

steps_t0=$SECONDS
step_names=()
step_seconds=()
step_current=""
step_started=0
step_failed=""
background_pids=()

step() {
  step_end
  step_current=$1
  step_started=$SECONDS
  printf '\n==> %s\n' "$2"
}

step_end() {
  if [ -n "$step_current" ]; then
    step_names+=("$step_current")
    step_seconds+=($((SECONDS - step_started)))
    step_current=""
  fi
}

# in_background NAME CMD...: CMD runs now, its output into $logs/NAME.log, its own duration
# into $logs/NAME.seconds.
in_background() {
  local name=$1
  shift
  mkdir -p "$logs"
  rm -f "$logs/$name.seconds"
  (
    started=$SECONDS
    status=0
    "$@" >"$logs/$name.log" 2>&1 || status=$?
    echo $((SECONDS - started)) >"$logs/$name.seconds"
    exit $status
  ) &
  background_pids+=("$name=$!")
  printf '\n==> %s: started in the background (log: %s)\n' "$name" "$logs/$name.log"
}

join_background() {
  local name=$1 entry pid="" status=0
  for entry in "${background_pids[@]}"; do
    [ "${entry%%=*}" = "$name" ] && pid=${entry#*=}
  done
  step "wait: $name" "waiting for $name"
  wait "$pid" || status=$?
  cat "$logs/$name.log"
  step_end
  # The background step's own duration, beside the time spent waiting for it.
  step_names+=("$name (in the background)")
  step_seconds+=("$(cat "$logs/$name.seconds" 2>/dev/null || echo "?")")
  if [ "$status" -ne 0 ]; then
    step_failed="$name (in the background)"
    echo "$name failed with status $status" >&2
    return "$status"
  fi
}

background_stop() {
  local entry
  for entry in "${background_pids[@]}"; do
    kill "${entry#*=}" 2>/dev/null || true
  done
}

steps_table() {
  local status=$1 failed=${step_current:-$step_failed} i mark
  step_end
  {
    printf '| step | s |\n|---|---:|\n'
    for i in "${!step_names[@]}"; do
      mark=""
      if [ "$status" -ne 0 ] && [ "${step_names[$i]}" = "$failed" ]; then
        mark=" **(failed)**"
      fi
      printf '| %s%s | %s |\n' "${step_names[$i]}" "$mark" "${step_seconds[$i]}"
    done
    printf '| **total** | **%d** |\n' $((SECONDS - steps_t0))
  } >"$logs/steps.md"
  printf '\n==> seconds per step (also in %s)\n' "$logs/steps.md"
  cat "$logs/steps.md"
}

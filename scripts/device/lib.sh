# What every scripts/device/*-check.sh shares; source it, then call check_begin first:
#
#   . "$(dirname "$0")/lib.sh"
#   check_begin NAME "step1,step2,..."     # OUT, logging to $OUT/NAME.log, the summary, the bundle
#   step step1 60 some_function             # timeout 60 s; recorded pass/fail with its time
#   check_end                               # closes $OUT/summary.json; exit 1 if a step failed
#
# Conventions (scripts/device/README.md): run from the repository root; the bundle of pack.sh
# at .device-bundle/ (or an unpacked one named by TANDEM_CHECK_UNPACKED, as run-all.sh does);
# TANDEM_CHECK_DEVICE=cuda|simt (simt: a dry run on the host, in place when there is no
# bundle); TANDEM_CHECK_STEPS=a,b picks steps; TANDEM_CHECK_WORK is the scratch directory.
# After check_begin the working directory is the unpacked bundle (or the repository, in place),
# and these are set and exported: repo, OUT, device, work, steps, models, gpu; and the helpers
# random_model, up_start and up_stop.

check_record() {  # name status seconds [detail]
  local sep=","
  [ "$check_first" = 1 ] && sep="" && check_first=0
  printf '%s\n  "%s": {"status": "%s", "seconds": %s, "detail": %s}' "$sep" "$1" "$2" "$3" \
    "$(printf '%s' "${4:-}" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')" >>"$check_summary"
}

skip_because() { echo "skipped: $2"; echo "$2" >"$work/.skip-$1"; }

want() { case ",$steps," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# step NAME TIMEOUT COMMAND...: a function of the calling script (exported with export -f) or a
# program; skipped unless NAME is in $steps. Exit 0 passes, 77 is a skip (say why with
# `skip_because NAME REASON` before returning 77: e.g. a dry run where a Python package is
# missing), anything else fails; a timeout is recorded as such.
step() {
  local name=$1 limit=$2
  shift 2
  want "$name" || return 0
  # A dry run on the SIMT harness is slower than a GPU (run-all.sh scales its budgets the same way).
  [ "$device" = simt ] && limit=$((limit * ${TANDEM_CHECK_SIMT_SCALE:-4}))
  echo "=== $name ($(($(date +%s) - check_started)) s in)"
  local t0 rc dt
  t0=$(date +%s)
  if declare -F "$1" >/dev/null; then
    timeout "$limit" bash -c "$*"
  else
    timeout "$limit" "$@"
  fi
  rc=$?
  dt=$(($(date +%s) - t0))
  if [ $rc = 0 ]; then
    check_record "$name" pass "$dt"
  elif [ $rc = 77 ]; then
    check_record "$name" skip "$dt" "$(tail -1 "$work/.skip-$name" 2>/dev/null || echo 'skipped')"
  elif [ $rc = 124 ]; then
    check_record "$name" fail "$dt" "timed out after $limit s"
  else
    check_record "$name" fail "$dt" "exit $rc"
  fi
  echo "=== $name: exit $rc in ${dt} s"
}

# Makes the bundle's files the working directory: reuse TANDEM_CHECK_UNPACKED, else unpack
# .device-bundle/bundle.tar.xz into $work/bundle; on simt without a bundle, stay in the
# repository (its own native/build and dist/).
check_enter_bundle() {
  if [ -n "${TANDEM_CHECK_UNPACKED:-}" ] && [ -d "$TANDEM_CHECK_UNPACKED" ]; then
    cd "$TANDEM_CHECK_UNPACKED" || return 1
  elif [ -f "$repo/.device-bundle/bundle.tar.xz" ]; then
    echo "=== unpack"
    rm -rf "$work/bundle"
    mkdir -p "$work/bundle"
    tar -C "$work/bundle" -xJf "$repo/.device-bundle/bundle.tar.xz" || return 1
    cd "$work/bundle" || return 1
  elif [ "$device" = simt ]; then
    echo "=== no bundle: running in place on simt (dry run)"
    cd "$repo" || return 1
    return 0
  else
    echo "no bundle: run scripts/device/pack.sh first" >&2
    return 1
  fi
  export PATH="$(pwd)/node/bin:$PATH"
}

# random_model SHAPE DIR: random bf16 weights in a model's shape (tandem_gpu_bench make-model)
# with the tiny tokenizer of its family beside them: the frontend needs a tokenizer.json, and
# ids past the tiny vocabulary decode to nothing, so compare token ids (return_tokens_as_token_ids),
# never text. Reuses DIR when it is complete.
random_model() {
  local shape=$1 dir=$2 arch=qwen2
  case $shape in llama*) arch=llama ;; esac
  if [ ! -f "$dir/config.json" ]; then
    native/build/tandem_gpu_bench make-model --shape "$shape" --out "$dir" >/dev/null || return 1
  fi
  if [ ! -f "$dir/tokenizer.json" ]; then
    local tok="$work/tokenizer-$arch"
    [ -f "$tok/tokenizer.json" ] || node bin/runtime.js model make-tiny --arch "$arch" --out "$tok" >/dev/null || return 1
    cp "$tok/tokenizer.json" "$tok/tokenizer_config.json" "$dir/" || return 1
  fi
}

# up_start LOG PORT FLAGS...: `runtime up --engine native --device $device` on PORT in the
# background (its output to LOG, up_pid set); returns 0 once it serves (its ready line), 1 if it
# exited or is not ready within 2 minutes. up_stop: SIGINT (a graceful stop), then wait for it.
up_start() {
  local log=$1 port=$2
  shift 2
  node bin/runtime.js up --engine native --device "$device" --http-port "$port" --log-level warn "$@" >"$log" 2>&1 &
  up_pid=$!
  for _ in $(seq 1 240); do
    grep -q "Press Ctrl-C" "$log" && return 0
    kill -0 "$up_pid" 2>/dev/null || return 1
    sleep 0.5
  done
  return 1
}
up_stop() {
  kill -INT "$up_pid" 2>/dev/null
  wait "$up_pid"
}

check_begin() {  # name default_steps
  check_name=$1
  repo=$(pwd)
  OUT=${OUT:-$repo/.device-out}
  mkdir -p "$OUT"
  exec > >(tee -a "$OUT/$check_name.log") 2>&1
  device=${TANDEM_CHECK_DEVICE:-cuda}
  steps=${TANDEM_CHECK_STEPS:-$2}
  work=${TANDEM_CHECK_WORK:-/tmp/tandem-$check_name}
  mkdir -p "$work"
  check_started=$(date +%s)
  check_summary="$OUT/summary.json"
  check_first=1
  echo "{" >"$check_summary"
  check_enter_bundle || { echo "}" >>"$check_summary"; exit 1; }
  export TANDEM_TEST_DEVICE=$device TANDEM_CACHE_DIR="$work/cache"
  export TANDEM_CUBLASLT=${TANDEM_CUBLASLT:-$(python3 -c 'import glob,site; c=[p for d in site.getsitepackages() for p in glob.glob(d+"/nvidia/*/lib/libcublasLt.so.*")]; print(c[0] if c else "")' 2>/dev/null)}
  [ -z "$TANDEM_CUBLASLT" ] && unset TANDEM_CUBLASLT
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>/dev/null || echo "no nvidia-smi")
  echo "gpu: $gpu"
  local commit
  commit=$(cat COMMIT 2>/dev/null || git -C "$repo" rev-parse HEAD 2>/dev/null)
  echo "commit $commit"
  check_record gpu info 0 "$gpu; commit $commit"
  models=${TANDEM_CHECK_MODELS:-$work/models}
  mkdir -p "$models"
  export repo OUT device work steps models gpu check_started
  export -f want check_record skip_because random_model up_start up_stop
}

check_end() {
  echo "}" >>"$check_summary"
  echo "=== done in $(($(date +%s) - check_started)) s"
  cat "$check_summary"
  grep -q '"fail"' "$check_summary" && exit 1
  exit 0
}

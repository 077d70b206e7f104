#!/usr/bin/env bash
# ember-cuda's GPU check: everything a GPU machine can tell us, in one command that never hangs.
#
#   bash plugins/cuda/gpu_check.sh [OUT]        (OUT: default $OUT when set, else ./gpu-check-out)
#
# Runs these parts in order, each under its own timeout (`timeout` stops a part with every process
# it started), none stopping the next: the smoke test (gpu_smoke.py), ember-cuda's GPU tests, conformance
# levels 0-3 on cuda, bench_cuda.py, the training benchmarks on the GPU (bench_train.py --device cuda),
# the demo on cuda (issue 26: >= 97 %, nothing through the fallback), then the 16-core host's CPU benchmarks (bench_core.py and
# bench_train.py with --threads = the cores) and ember-vulkan on the same GPU (conformance levels
# 0-2, bench_vulkan.py).  Writes OUT/summary.md (one row per part: status, seconds, the last line
# of its output) and OUT/gpu-check.tar.gz (every part's full output, the conformance reports, the
# benchmark's JSON), and prints the summary.  Exit status 0 when no part failed or timed out.
#
# Environment: PYTHON (default python3); GPU_CHECK_BUDGET, the seconds all parts may take together
# (default 480: a device call may run 600 s, and the kit's install and the archive need some; a part
# that would start with less than 5 s left is not run); GPU_CHECK_ONLY, a space-separated list of
# the parts to run (the names in the summary's first column).
set -uo pipefail
started=$SECONDS

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:-${OUT:-./gpu-check-out}}
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 2
py=${PYTHON:-python3}
budget=${GPU_CHECK_BUDGET:-480}
only=" ${GPU_CHECK_ONLY:-} "
cores=$(nproc)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PYTHONUNBUFFERED=1  # a part stopped by its timeout still leaves what it printed

parts=(smoke pytest conformance-cuda bench-cuda train-cuda demo-cuda bench-core bench-train conformance-vulkan
       bench-vulkan)
for name in ${GPU_CHECK_ONLY:-}; do
  [[ " ${parts[*]} " == *" $name "* ]] || { echo "gpu_check: no part named '$name' (parts: ${parts[*]})" >&2; exit 2; }
done

gpu=$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null \
      | head -n 1) || gpu=""
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo "not a git checkout")
{
  echo "# ember-cuda GPU check"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'); GPU: ${gpu:-none found by nvidia-smi}; $cores cores; $($py --version 2>&1);"
  echo "commit $commit; budget ${budget} s"
  echo
  echo "| part | status | seconds | last line of output |"
  echo "|---|---|---|---|"
} >"$work/summary.md"

failed=0

# part NAME TIMEOUT COMMAND...: run COMMAND from the repository root under min(TIMEOUT, the budget
# left), its output in NAME.log, and add its row to the summary.
part() {
  local name=$1 limit=$2 status rc last begin
  shift 2
  [[ -z "${GPU_CHECK_ONLY:-}" || "$only" == *" $name "* ]] || return 0
  local left=$((budget - (SECONDS - started)))
  ((limit > left)) && limit=$left
  if ((limit < 5)); then
    echo "| $name | not run | 0 | the check's budget of ${budget} s is spent |" >>"$work/summary.md"
    return 0
  fi
  echo "gpu_check: $name (up to ${limit} s)" >&2
  begin=$SECONDS
  (cd "$root" && timeout -k 5 "$limit" "$@") >"$work/$name.log" 2>&1 </dev/null
  rc=$?
  case $rc in
    0) status=ok ;;
    77) status=skipped ;;
    124) status="timeout (${limit} s)"; failed=1 ;;
    137) status="killed (exit 137: its timeout, or out of memory)"; failed=1 ;;
    *) status="failed (exit $rc)"; failed=1 ;;
  esac
  last=$(grep -v '^[[:space:]]*$' "$work/$name.log" | tail -n 1 | cut -c 1-200 | sed 's/|/\\|/g')
  echo "| $name | $status | $((SECONDS - begin)) | ${last:--} |" >>"$work/summary.md"
}

jobs=$((cores > 2 ? cores / 2 : 1))
part smoke 90 "$py" plugins/cuda/gpu_smoke.py
part pytest 150 "$py" -m pytest -q -p no:cacheprovider -m "not no_device" --junitxml="$work/pytest.xml" \
  plugins/cuda/tests  # the tests that need no device ran on CI: no GPU minutes for them
part conformance-cuda 180 "$py" -m ember_conformance run --device cuda --level 3 --jobs "$jobs" --no-progress \
  --out "$work/conformance-cuda"
part bench-cuda 150 "$py" bench/bench_cuda.py --json "$work/bench_cuda.json"
part train-cuda 150 "$py" bench/bench_train.py --device cuda --rounds 2
part demo-cuda 90 env EMBER_FALLBACK=error "$py" -m ember_core.cli demo --device cuda
part bench-core 90 "$py" bench/bench_core.py --threads "$cores"
part bench-train 150 "$py" bench/bench_train.py --threads "$cores"
part conformance-vulkan 120 "$py" -m ember_conformance run --device vulkan --level 2 --jobs "$jobs" --no-progress \
  --out "$work/conformance-vulkan"
part bench-vulkan 90 "$py" bench/bench_vulkan.py

echo >>"$work/summary.md"
echo "$((SECONDS - started)) s in all; details in gpu-check.tar.gz" >>"$work/summary.md"
cp "$work/summary.md" "$out/summary.md"
timeout 60 tar -czf "$out/gpu-check.tar.gz" -C "$work" . || echo "gpu_check: the archive could not be written" >&2
cat "$out/summary.md"
exit $failed

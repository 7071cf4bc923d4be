#!/usr/bin/env bash
# GPU speed: synthesizes llama2-7b (q4_k_m, f16) and llama3.2-1b (f16) on the
# GPU machine and runs `memra bench --device cuda --roofline -p 512 -n 128 -r 5`
# on each (the q4_k_m model also at batch 16 and 64, at 5 in a backend of 5 (a speculative
# verify step), and at 1, 16 and 64 in the int8 class of --batch-invariant); on the q4_k_m model also the
# serving load test (`memra serve` +
# `memra bench serve` at concurrency 1, 4, 16, 64; SERVE=0 skips it) and the
# batch sweep -b 1,2,4,8,16,32,64 (-p 128 -n 32) with a plot (GEMV arms are
# compared by `memra autotune`'s confirmation, a tunedb entry choosing each). Logs, JSON and SVGs go under
# $OUT (or /tmp/memra-bench); the docs/PERFORMANCE.md rows are printed last.
#
# Build here first (no GPU needed), then on the GPU machine:
#   make gpu-build                     # .gpu/memra
#   scripts/gpu-bench.sh [BIN]         # BIN defaults to .gpu/memra
# Budget: about 9 minutes on an H200 (each step has a timeout; SERVE=0 saves about two).
set -u
cd "$(dirname "$0")/.."
BIN=${1:-${BIN:-.gpu/memra}}
OUT=${OUT:-/tmp/memra-bench}
MODELS=${MODELS:-/tmp/memra-models}
mkdir -p "$OUT" "$MODELS"
export MEMRA_NVRTC_DIR=${MEMRA_NVRTC_DIR:-/usr/local/cuda/targets/x86_64-linux/lib}
summary=()
failed=0

# step NAME SECONDS CMD…: run CMD under a timeout, output in $OUT/NAME.log.
step() {
	local name=$1 limit=$2 t0 rc
	shift 2
	t0=$(date +%s)
	timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
	rc=$?
	local r=pass
	[ $rc -ne 0 ] && r="FAIL($rc)" && failed=1
	summary+=("$(printf '%-28s %-9s %4ss' "$name" "$r" $(($(date +%s) - t0)))")
	echo "$name: $r ($(($(date +%s) - t0)) s)" >&2
	return $rc
}

# synth PRESET QUANT [EXTRA…]: write $MODELS/PRESET-QUANT.gguf once.
synth() {
	local preset=$1 quant=$2 f="$MODELS/$1-$2.gguf"
	shift 2
	[ -s "$f" ] && return 0
	step "synth-$preset-$quant" 240 "$BIN" synth --preset "$preset" --quant "$quant" --quiet -o "$f.tmp" "$@" && mv "$f.tmp" "$f"
}

# bench NAME MODEL SECONDS [EXTRA…]: the standard bench with roofline, rows and JSON.
bench() {
	local name=$1 model=$2 limit=$3
	shift 3
	step "bench-$name" "$limit" "$BIN" bench "$model" --device cuda --roofline -p 512 -n 128 -r 5 \
		--no-progress --perf-rows --json "$OUT/bench-$name.json" "$@"
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$OUT/gpu.txt" 2>&1 || true

Q4="$MODELS/llama2-7b-q4_k_m.gguf"
F16_7B="$MODELS/llama2-7b-f16.gguf"
F16_1B="$MODELS/llama3.2-1b-f16.gguf"

# serve_bench: memra serve on the q4_k_m model, then `memra bench serve` at
# concurrency 1, 4, 16, 64 (completions, 512-token prompts, 128 tokens each).
serve_bench() {
	"$BIN" serve --model "llama2-7b-q4_k_m=$Q4" --device cuda --port 8199 --max-running 64 >"$OUT/serve.log" 2>&1 &
	local pid=$! i
	trap 'kill -TERM $pid 2>/dev/null' EXIT
	for i in $(seq 1 120); do
		(exec 3<>/dev/tcp/127.0.0.1/8199) 2>/dev/null && break
		kill -0 $pid 2>/dev/null || return 1
		sleep 1
	done
	"$BIN" bench serve --url http://127.0.0.1:8199 --endpoint completions --concurrency 1,4,16,64 --duration 20s --out "$OUT/serve-bench"
	local rc=$?
	kill -TERM $pid
	wait $pid
	return $rc
}

# Small and fast first, so a slow f16 7B synth cannot starve the rest.
synth llama2-7b q4_k_m --weights blocks
synth llama3.2-1b f16
[ -s "$Q4" ] && bench llama2-7b-q4_k_m "$Q4" 90
# issue 33's verify step: 5 rows in a backend of 5 (memra run --spec with 4 drafts), whose step time
# is set against the one-row step above (bar 1.3x)
[ -s "$Q4" ] && bench llama2-7b-q4_k_m-verify5 "$Q4" 90 -b 5
[ -s "$Q4" ] && bench llama2-7b-q4_k_m-b16 "$Q4" 180 -b 16,64
# the int8 class of --batch-invariant at 1, 16 and 64 rows, beside the default's in the same call (issue 31:
# whether it can become the default)
[ -s "$Q4" ] && bench llama2-7b-q4_k_m-inv-int8 "$Q4" 150 -b 1,16,64 --batch-invariant=int8
[ -s "$F16_1B" ] && bench llama3.2-1b-f16 "$F16_1B" 60
export -f serve_bench
export BIN Q4 OUT
[ -s "$Q4" ] && [ "${SERVE:-1}" = 1 ] && step serve-bench 150 bash -c serve_bench
# batch sweep: shorter prompt and generation so batch 64 fits the step's time
[ -s "$Q4" ] && step bench-llama2-7b-q4_k_m-batch 120 "$BIN" bench "$Q4" --device cuda --roofline -p 128 -n 32 -r 3 \
	-b 1,2,4,8,16,32,64 --no-progress --perf-rows --json "$OUT/bench-batch.json" --plot "$OUT/llama2-7b-q4_k_m-batch.svg"
synth llama2-7b f16
[ -s "$F16_7B" ] && bench llama2-7b-f16 "$F16_7B" 90
echo
echo "== steps"
printf '%s\n' "${summary[@]}"
echo
for f in "$OUT"/bench-*.log; do
	[ -e "$f" ] || continue
	grep -h '^roofline:' "$f" | sed "s|^|$(basename "$f" .log): |"
done
[ -e "$OUT/serve-bench/serve-bench.md" ] && cat "$OUT/serve-bench/serve-bench.md"
echo
echo "| date | commit | card (driver) | model: preset, quant, file bytes | test | batch | N | median | min–max | roofline % | notes |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for f in "$OUT"/bench-*.log; do
	[ -e "$f" ] || continue
	grep -h '^| 2[0-9][0-9][0-9]-' "$f"
done
exit $failed

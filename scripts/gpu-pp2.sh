#!/usr/bin/env bash
# Pipeline parallelism (PP-2) on a machine with two GPUs (or one: set DEVICES=0,0).
#   1. parity: a small synthesized model that fits one card gives the same greedy tokens on
#      PP-2 as on one GPU: `memra run` with 128 tokens for several prompts (batch 1), and the
#      stage test binary (batch 1 and 8, 128 steps, device-to-device/peer and host-bounce copies);
#   2. big: synthesizes llama2-7b with 400 layers in bf16 (~165 GB, more than one H200 holds),
#      serves it on PP-2 (--max-running 1: the KV cache of 400 layers at 4096 positions is ~27 GB
#      per sequence) and sends a smoke request (skipped when the disk lacks the space);
#   3. speed: `memra bench --pp 2` decode and prompt at batch 1 and 16, with the boundary copy
#      time the bench prints, on the small model and (when present) the big one.
# Build here first (no GPU needed):
#   make gpu-build                                  # .gpu/memra
#   go test -c -o .gpu/cuda.test ./runtime/cuda     # the stage parity test
# then on the GPU machine:  scripts/gpu-pp2.sh [BIN]
# Logs under $OUT (default /tmp/memra-pp2); a summary is printed last.
set -u
cd "$(dirname "$0")/.."
BIN=${1:-${BIN:-.gpu/memra}}
TEST_BIN=${TEST_BIN:-.gpu/cuda.test}
OUT=${OUT:-/tmp/memra-pp2}
MODELS=${MODELS:-/tmp/memra-models}
DEVICES=${DEVICES:-0,1}
mkdir -p "$OUT" "$MODELS"
export MEMRA_NVRTC_DIR=${MEMRA_NVRTC_DIR:-/usr/local/cuda/targets/x86_64-linux/lib}
summary=()
failed=0

step() {
	local name=$1 limit=$2 t0 rc
	shift 2
	t0=$(date +%s)
	timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
	rc=$?
	local r=pass
	[ $rc -ne 0 ] && r="FAIL($rc)" && failed=1
	summary+=("$(printf '%-32s %-9s %5ss' "$name" "$r" $(($(date +%s) - t0)))")
	echo "$name: $r ($(($(date +%s) - t0)) s)" >&2
	return $rc
}

nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader >"$OUT/gpu.txt" 2>&1 || true
nvidia-smi topo -m >>"$OUT/gpu.txt" 2>&1 || true

# --- 1. parity on a model that fits one card -------------------------------------------------
SMALL="$MODELS/llama3-8b-q4_k_m.gguf"
[ -s "$SMALL" ] || step synth-small 300 "$BIN" synth --preset llama3-8b --quant q4_k_m --quiet -o "$SMALL.tmp" && mv "$SMALL.tmp" "$SMALL" 2>/dev/null
i=0
for prompt in "Once upon a time" "The capital of France is" "def fibonacci(n):" "In 1969, the first"; do
	i=$((i + 1))
	step "run-1gpu-$i" 300 "$BIN" run "$SMALL" --device cuda -n 128 --temperature 0 --ignore-eos --print-ids -p "$prompt"
	step "run-pp2-$i" 300 "$BIN" run "$SMALL" --device cuda --pp 2 --pp-devices "$DEVICES" -n 128 --temperature 0 --ignore-eos --print-ids -p "$prompt"
	a=$(grep '^generated ids:' "$OUT/run-1gpu-$i.log")
	b=$(grep '^generated ids:' "$OUT/run-pp2-$i.log")
	if [ -n "$a" ] && [ "$a" = "$b" ]; then
		summary+=("$(printf '%-32s %-9s' "tokens-equal-$i" pass)")
	else
		summary+=("$(printf '%-32s %-9s' "tokens-equal-$i" FAIL)") && failed=1
	fi
done
if [ -x "$TEST_BIN" ]; then
	MEMRA_PP_TEST_DEVICES=$DEVICES MEMRA_PP_TEST_STEPS=128 \
		step stage-test-b1-b8 600 "$TEST_BIN" -test.run 'TestGPUStagesOneDevice|TestLowerStagePrograms' -test.v
else
	summary+=("$(printf '%-32s %-9s' stage-test-b1-b8 "skipped (no $TEST_BIN)")")
fi

# --- 2. a model larger than one card ---------------------------------------------------------
BIG="$MODELS/llama2-7b-400l-bf16.gguf"
need_gb=175 # ~165 GB of weights plus headroom
free_gb=$(df -BG --output=avail "$MODELS" | tail -1 | tr -dc 0-9)
echo "disk: ${free_gb} GB free under $MODELS, the 400-layer bf16 model needs ~${need_gb} GB" | tee "$OUT/disk.txt" >&2
if [ -s "$BIG" ] || [ "${free_gb:-0}" -ge "$need_gb" ]; then
	[ -s "$BIG" ] || step synth-big 3600 "$BIN" synth --preset llama2-7b --layers 400 --quant bf16 --weights blocks --quiet -o "$BIG.tmp" && mv "$BIG.tmp" "$BIG" 2>/dev/null
	if [ -s "$BIG" ]; then
		PORT=${PORT:-18080}
		"$BIN" serve "$BIG" --device cuda --pp 2 --pp-devices "$DEVICES" --port "$PORT" --max-running 1 >"$OUT/serve-big.log" 2>&1 &
		spid=$!
		ok=0
		for _ in $(seq 1 600); do
			curl -sf "http://127.0.0.1:$PORT/ready" >/dev/null 2>&1 && ok=1 && break
			kill -0 $spid 2>/dev/null || break
			sleep 2
		done
		if [ $ok = 1 ]; then
			step serve-big-smoke 300 curl -sf "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
				-d '{"model":"llama2-7b-400l-bf16","prompt":"Hello","max_tokens":16,"temperature":0}'
		else
			summary+=("$(printf '%-32s %-9s' serve-big-smoke "FAIL (not ready; see serve-big.log)")") && failed=1
		fi
		kill $spid 2>/dev/null
		wait $spid 2>/dev/null
	fi
else
	summary+=("$(printf '%-32s %-9s' big-model "skipped (${free_gb} GB free < ${need_gb} GB)")")
fi

# --- 3. speed, with the boundary copy time ---------------------------------------------------
step bench-1gpu-small 600 "$BIN" bench "$SMALL" --device cuda -p 512 -n 128 -b 1,16 -r 5 --no-progress --perf-rows
step bench-pp2-small 600 "$BIN" bench "$SMALL" --device cuda --pp 2 --pp-devices "$DEVICES" -p 512 -n 128 -b 1,16 -r 5 --no-progress --perf-rows
if [ -s "$BIG" ]; then
	step bench-pp2-big 1800 "$BIN" bench "$BIG" --device cuda --pp 2 --pp-devices "$DEVICES" -p 512 -n 128 -b 1,16 -r 3 --no-progress --perf-rows
fi

echo
printf '%s\n' "${summary[@]}"
echo "boundary copy (from bench):"
grep -h '^pipeline:' "$OUT"/bench-pp2-*.log 2>/dev/null
exit $failed

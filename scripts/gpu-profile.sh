#!/usr/bin/env bash
# Where decode time goes on the GPU, in one device call: synthesizes
# llama2-7b q4_k_m and llama3.2-1b f16, benches decode at batch 1 and 16 with
# --profile (each kernel of one step timed between CUDA events), with the
# family defaults, with the non-default switches (MEMRA_SMALL_BATCH=1,
# MEMRA_DECODE_LIVE=1), then after `memra autotune` of the decode families
# on the model's own shapes. Logs under $OUT (or /tmp/memra-profile).
#
#   make gpu-build && scripts/gpu-profile.sh [BIN]
set -u
cd "$(dirname "$0")/.."
BIN=${1:-${BIN:-.gpu/memra}}
OUT=${OUT:-/tmp/memra-profile}
MODELS=${MODELS:-/tmp/memra-models}
BUDGET=${BUDGET:-150s}
mkdir -p "$OUT" "$MODELS"
export MEMRA_NVRTC_DIR=${MEMRA_NVRTC_DIR:-/usr/local/cuda/targets/x86_64-linux/lib}
summary=()

step() { # step NAME SECONDS CMD…
	local name=$1 limit=$2 t0=$(date +%s) rc
	shift 2
	timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
	rc=$?
	summary+=("$(printf '%-40s rc=%-4s %4ss' "$name" "$rc" $(($(date +%s) - t0)))")
	echo "$name: rc=$rc ($(($(date +%s) - t0)) s)" >&2
	return $rc
}
synth() { # synth FILE ARGS…
	local f=$1
	shift
	[ -s "$f" ] || step "synth-$(basename "$f" .gguf)" 240 "$BIN" synth --quiet -o "$f" "$@"
}
bench() { # bench NAME MODEL SECONDS ARGS…
	local name=$1 model=$2 limit=$3
	shift 3
	step "bench-$name" "$limit" "$BIN" bench "$model" --device cuda -p 512 -n 128 -r 3 --no-progress --profile "$@"
}

Q4="$MODELS/llama2-7b-q4_k_m.gguf"
F1B="$MODELS/llama3.2-1b-f16.gguf"
synth "$Q4" --preset llama2-7b --quant q4_k_m --weights blocks
synth "$F1B" --preset llama3.2-1b --quant f16
bench q4-default "$Q4" 90 -b 1,16
MEMRA_SMALL_BATCH=1 MEMRA_DECODE_LIVE=1 bench q4-switches "$Q4" 90 -b 1,16
bench f1b-default "$F1B" 60 -b 1
step autotune-q4 240 "$BIN" autotune "$Q4" --families gemv,gemm_small,attn_decode_live --budget "$BUDGET" --report "$OUT/autotune-q4"
MEMRA_SMALL_BATCH=1 MEMRA_DECODE_LIVE=1 bench q4-tuned-switches "$Q4" 90 -b 1,16 --roofline
echo
printf '%s\n' "${summary[@]}"
for f in "$OUT"/bench-*.log; do
	echo "== $(basename "$f")"
	grep -E '^\| (llama|model)|^kernel sum|^profile:' "$f" | head -12
done

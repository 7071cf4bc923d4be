#!/usr/bin/env bash
# Where decode time goes on the GPU, in one device call: kernel-check of the
# decode kernels at llama3-8b shapes (every GEMV arm of the repacked types),
# then llama2-7b q4_k_m and llama3.2-1b f16 (and with F16_7B=1 llama2-7b f16)
# benched with --profile (each kernel of one step timed between CUDA events)
# and --roofline; the q4_k_m model also with the float GEMVs
# (MEMRA_GEMV_QUANT=repack, =file); PARITY=1 adds CPU↔GPU greedy parity.
# Logs under $OUT (or /tmp/memra-profile).
#
#   make gpu-build && scripts/gpu-profile.sh [BIN]
set -u
cd "$(dirname "$0")/.."
BIN=${1:-${BIN:-.gpu/memra}}
OUT=${OUT:-/tmp/memra-profile}
MODELS=${MODELS:-/tmp/memra-models}
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
F7B="$MODELS/llama2-7b-f16.gguf"
step kernel-check 240 "$BIN" kernel-check --shapes llama3-8b --types q4_k,q6_k,q8_0,q4_0,f16,bf16 --reps 10
synth "$Q4" --preset llama2-7b --quant q4_k_m --weights blocks
synth "$F1B" --preset llama3.2-1b --quant f16
bench q4 "$Q4" 120 -b 1,16 --roofline
MEMRA_GEMV_QUANT=repack bench q4-repack "$Q4" 60 -b 1
[ -n "${FILE_ARM:-}" ] && MEMRA_GEMV_QUANT=file bench q4-file "$Q4" 60 -b 1
bench f1b "$F1B" 60 -b 1 --roofline
[ -n "${F16_7B:-}" ] && synth "$F7B" --preset llama2-7b --quant f16 && bench f7b "$F7B" 90 -b 1 --roofline
[ -n "${PARITY:-}" ] && step parity-exact 120 "$BIN" gpu-parity --preset llama3-8b --quant q4_k_m --layers 2 --dim 512 --steps 64 --prompts 2 --cache f32 --prefill-gemv
[ -n "${PARITY:-}" ] && step parity-default 120 "$BIN" gpu-parity --preset llama3-8b --quant q4_k_m --layers 2 --dim 512 --steps 64 --prompts 2 --tie-tol 0.02
echo
printf '%s\n' "${summary[@]}"
for f in "$OUT"/bench-*.log; do
	echo "== $(basename "$f")"
	grep -E '^\| (synth|model)|^kernel sum|^profile:|^roofline' "$f" | head -12
done
grep -E 'FAIL|fail' "$OUT/kernel-check.log" | head -20
tail -3 "$OUT/kernel-check.log"

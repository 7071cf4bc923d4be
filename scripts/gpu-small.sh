#!/usr/bin/env bash
# The small-row f16 decode products (GEMVArm.XQ 4 with 8 rows a block; codegen/gemv_mmah_small.go) on
# the GPU machine, in one call of about 8 minutes on an H100 with the default two arms:
#
#   (i)   kernel-check of the small-row arms against the CPU reference at llama3-8b's QKV and down
#         products (1, 2, 5 and 8 rows; Q4_K and Q6_K), each beside the 16-row default, with timings
#   (ii)  bench of a synthesized llama2-7b q4_k_m at batch 1, 2, 5 and 8, tg128@512: the defaults, then
#         --batch-invariant with the defaults (the 16-row f16 arm at every width), then --batch-invariant
#         with each arm of $ARMS named for every product by a user tunedb entry (class <product>_small:
#         the f16 kernel of every width there), then the default configuration with each arm as the
#         kernel of 3 to 8 rows (the same entries; 9 rows or more would take the wide arm)
#   (iii) the tg rows of each bench
#
#   scripts/gpu-small.sh
#   ARMS="t256_r1_u2_s1_l1_h8_p4" scripts/gpu-small.sh          # one arm: about 5.5 minutes
#   ARMS="t128_r1_u2_s1_l1_h8_p4 t256_r1_u1_s1_l1_h8_w4_p8" scripts/gpu-small.sh
#
# Build here first (make gpu-build) and carry the .gz files (the script unpacks them). The user tunedb
# of each arm is a folder under $OUT used as XDG_CONFIG_HOME: its entries are filed under the shipped
# H200 key, so an H200 takes them as its own and an H100 (no file of its own) as the nearest sm_90
# card's, over the shipped entries. Logs go to $OUT (default /tmp/memra-small); a short table is
# printed last. Each bench is about 60 to 70 s: keep ARMS to two for one call of the 10-minute limit.
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-.gpu/memra}
OUT=${OUT:-/tmp/memra-small}
MODELS=${MODELS:-/tmp/memra-models}
ARMS=${ARMS:-t256_r1_u2_s1_l1_h8_p4 t512_r1_u2_s1_l1_h8_w2_p2}
BATCHES=${BATCHES:-1,2,5,8}
CHECK=${CHECK:-1} # 0 skips the kernel-check step
TUNEDB_KEY=nvidia-h200.sm90.132sm.140gib # the shipped sm_90 file the entries join
STEP_WIDTH=44
source scripts/gpu-lib.sh

# arm_point NAME: the tunedb point (JSON) of a GEMV arm name such as t256_r1_u2_s1_l1_h8_p4.
arm_point() {
	local f v p=""
	for f in ${1//_/ }; do
		v=${f:1}
		case ${f:0:1} in
		t) p+="\"threads\": $v, " ;;
		r) p+="\"rows_per_block\": $v, " ;;
		u) p+="\"unroll\": $v, " ;;
		s) p+="\"shared_x\": $v, " ;;
		l) p+="\"layout\": $v, " ;;
		h) p+="\"xq\": 4, \"batch_rows\": $v, " ;;
		w) p+="\"rows_per_warp\": $v, " ;;
		p) p+="\"stages\": $v, " ;;
		*) return 1 ;;
		esac
	done
	echo "{${p%, }}"
}

# small_tunedb ARM DIR: a user tunedb in DIR (an XDG_CONFIG_HOME) naming ARM as the small-row f16 arm
# of every product class llama2-7b q4_k_m may have (fused or split QKV, attn_out, gate/up, down, the
# head; Q4_K and Q6_K); entries for classes the model lacks are never looked up.
small_tunedb() {
	local arm=$1 dir=$2/memra/tunedb pt sep="" t c
	pt=$(arm_point "$arm") || return 1
	mkdir -p "$dir"
	{
		printf '{"format": 1, "key": "%s", "device": {"Name": "NVIDIA H200", "SMMajor": 9, "SMMinor": 0, "SMs": 132, "MemGiB": 140},\n "entries": [\n' "$TUNEDB_KEY"
		for t in q4_k q6_k; do
			for c in n4096_k4096 n4096_k4096_res n8192_k4096 n12288_k4096 n22016_k4096 n4096_k11008_res n32000_k4096; do
				printf '%s  {"family": "gemv", "class": "%s_%s_small", "arm": %s, "arm_name": "%s", "time_us": 1, "tried": 1, "date": "2026-12-10", "memra_version": "dev", "driver": 0}' \
					"$sep" "$t" "$c" "$pt" "$arm"
				sep=$',\n'
			done
		done
		printf '\n]}\n'
	} >"$dir/$TUNEDB_KEY.json"
	"$BIN" tunedb show "$TUNEDB_KEY" --dir "$dir" | grep -c "_small" # the entries parse and validate
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$OUT/gpu.txt" 2>&1
L7=$MODELS/llama2-7b-q4_k_m.gguf

[ "$CHECK" = 1 ] && step kernel-check-small "$BIN" kernel-check --shapes llama3-8b --types q4_k,q6_k --only gemv-small --reps 3
step synth-llama2-7b synth "$L7" --preset llama2-7b --quant q4_k_m --weights blocks
bench() { # bench NAME XDG_CONFIG_HOME [FLAGS…]
	local name=$1 cfg=$2
	shift 2
	mkdir -p "$cfg"
	XDG_CONFIG_HOME=$cfg step "bench-$name" "$BIN" bench "$L7" --device cuda --no-progress --perf-rows -p 512 -n 128 -r "${RUNS:-3}" -b "$BATCHES" "$@"
}
bench default "$OUT/cfg-default"
bench invariant-default "$OUT/cfg-default" --batch-invariant
for a in $ARMS; do
	step "tunedb-$a" small_tunedb "$a" "$OUT/cfg-$a" || continue
	bench "invariant-$a" "$OUT/cfg-$a" --batch-invariant
done
for a in $ARMS; do
	[ -e "$OUT/cfg-$a/memra/tunedb/$TUNEDB_KEY.json" ] && bench "default-$a" "$OUT/cfg-$a"
done

[ -e "$OUT/kernel-check-small.log" ] && grep -h -E 'gemv-small' "$OUT/kernel-check-small.log" | head -120
for f in "$OUT"/bench-*.log; do
	echo "== $f"
	grep -h -E '^\| 2.*tg' "$f"
done
printf '%s\n' "${rows[@]}"
exit $failed

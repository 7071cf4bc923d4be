#!/usr/bin/env bash
# The GPU battery, in one call on the GPU machine: the CUDA runtime tests,
# kernel-check at real model shapes, the sm_90a/sm_120a compile gate, CPU↔GPU
# greedy parity on synthesized models, Hugging Face transformers parity,
# stories260K on the GPU, and the speed benchmarks. Logs go under $OUT (or
# /tmp/memra-battery); a short table is printed last.
#
# Build here first (no GPU needed), then run on the GPU machine:
#   make gpu-build        # .gpu/memra and .gpu/cuda.test (and .gz copies: carry those, the battery unpacks them)
#   scripts/gpu-battery.sh [quick|check|parity|bench|full|accept|quantout|tune|tune-f16|drop-f16|goals|nvrtc|sample|half|halfdef|from|fromdef|kv8|kv8def|b1|xq3|xq3p|large|rope|split|preload|live3|mma-pipe|defaults|blas|f16-prefill|serve|drop|profile|ncu|gemma|moe|quant]
# EXACT_ONLY=1 runs only the exact-configuration parity checks (strict token equality);
# NO_HF=1 skips the transformers comparison.
# One device call is limited to 10 minutes: run `check`, `parity` and `bench` as three calls
# (about 3, 8 and 6 minutes on an H200); `quick` is a few minutes of everything; `full` is all.
# `accept` is the codegen/runtime acceptance in one call (about 6 minutes): the CUDA tests,
# kernel-check on the three shapes in Q4_K, Q6_K, Q8_0 and BF16 (checks, no timing), the compile
# gate, stories260K, `memra run` on a synthesized model, and the exact-configuration parity
# against the CPU (9 combinations) and against transformers. `quantout` checks the quantising
# epilogues (MEMRA_QUANT_OUT) against the CPU: none, each alone, all, all without PDL. `tune`
# autotunes the int8 decode products of llama2-7b q4_k_m with the end-to-end confirmation
# (`tune-f16`: the f16 products of the 1B and 7B f16 models); `xq3`
# checks and times the int8 tensor-core batch arms (`xq3p`: the pipelined ones; `half`: the f16
# tensor-core ones, XQ 4, with parity at 16 and 32 sequences); `large` checks and times the products' third kernel
# for steps of 16 rows or more (parity at 16 sequences, batch sweep with plot, MEMRA_GEMV_LARGE=off
# against the default at batch 16); `rope` checks and times the launch-saving switch (RoPE in
# the QKV products' epilogue, on by default in one-sequence programs); `split` checks and times the one-row products that split K over
# two warps (MEMRA_GEMV_SPLIT); `preload` checks and times decode attention that reads its first
# keys before its dependency wait (MEMRA_DECODE_PRELOAD); `live3` checks and times decode attention
# splits sized by the card's multiprocessors (MEMRA_DECODE_LIVE=3); `mma-pipe` checks and times the
# pipelined prefill product (MEMRA_MMA); `drop` times batch 1 with each kernel class
# left out of the decode graph (MEMRA_DROP: what each costs inside the step); `profile` times each
# kernel of a decode step; `ncu` reads the
# hardware counters (Nsight Compute) of the batch-1 and batch-16 products and of decode
# attention, one table each (scripts/ncu_summary.py).
# Parity at 16 sequences (1024 positions) accepts flips up to 3.5× the step's RMS logit
# difference: the int8-activation class flips one token at 3.34–3.38× there with the CUDA-core
# batch kernel and with the tensor-core one alike (the same sequence and step), while the
# 128 positions of 2 sequences stay under 1× (docs/PERFORMANCE.md, session 8).
# Through the lent-GPU tool only 8 files come back: point OUT at a scratch folder and tar it.
set -u
cd "$(dirname "$0")/.."
MODE=${1:-full}
BIN=${BIN:-.gpu/memra}
OUT=${OUT:-/tmp/memra-battery}
MODELS=${MODELS:-/tmp/memra-models}
TUNEDB_KEY=${TUNEDB_KEY:-nvidia-h200.sm90.132sm.140gib} # the card whose merged tunedb tune and tune-f16 export
mkdir -p "$OUT" "$MODELS"
for f in .gpu/memra .gpu/cuda.test; do # carried gzipped: unpack (a binary left by an earlier call is older than its .gz)
	if [ -e "$f.gz" ] && { [ ! -e "$f" ] || [ "$f.gz" -nt "$f" ]; }; then gunzip -kf "$f.gz" && chmod +x "$f"; fi
done
export MEMRA_NVRTC_DIR=${MEMRA_NVRTC_DIR:-/usr/local/cuda/targets/x86_64-linux/lib}
rows=()
failed=0

# step NAME CMD…: run CMD with its output in $OUT/NAME.log and record pass/FAIL and seconds;
# returns CMD's status.
step() {
	local name=$1 t0 rc
	shift
	t0=$(date +%s)
	"$@" >"$OUT/$name.log" 2>&1
	rc=$?
	local r=pass
	[ $rc -ne 0 ] && r=FAIL && failed=1
	rows+=("$(printf '%-34s %-5s %5ss' "$name" "$r" "$(($(date +%s) - t0))")")
	echo "== $name: $r" >&2
	return $rc
}

sigma() { # sigma SEQS: gpu-parity's --tie-sigma for 64 steps of SEQS sequences (see the header)
	if [ "$1" -ge 16 ]; then echo 3.5; else echo 3; fi
}

synth() { # synth FILE ARGS…: write a synthesized model once
	local f=$1
	shift
	[ -e "$f" ] || "$BIN" synth --quiet "$@" -o "$f"
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >"$OUT/gpu.txt" 2>&1

has() { [ "$MODE" = full ] || [ "$MODE" = quick ] || [ "$MODE" = "$1" ] || { [ "$MODE" = accept ] && [ "$1" != bench ]; }; }
if [ "$MODE" = accept ]; then
	EXACT_ONLY=1
	KC_TYPES=q4_k,q6_k,q8_0,bf16
	KC_REPS=0 # checks only: no timing
fi

if has check; then
# in its package directory: the tests read ../../testdata
cuda_tests() { (cd runtime/cuda && ../../.gpu/cuda.test -test.v -test.count=1); }
step cuda-tests cuda_tests
step kernel-check "$BIN" kernel-check --shapes llama3-8b,qwen2.5-7b,qwen3-8b ${KC_TYPES:+--types $KC_TYPES} ${KC_REPS:+--reps $KC_REPS}
step compile-sm90a-sm120a "$BIN" kernel-check --compile-only --arch sm_90a,sm_120a --shapes llama3-8b,qwen2.5-7b,qwen3-8b

# stories260K: the same greedy story on the GPU as on the CPU.
stories() {
	"$BIN" run --device cpu --temperature 0 --max-tokens 100 >"$OUT/stories-cpu.txt" 2>/dev/null &&
		"$BIN" run --device cuda --temperature 0 --max-tokens 100 >"$OUT/stories-gpu.txt" 2>/dev/null &&
		cmp "$OUT/stories-cpu.txt" "$OUT/stories-gpu.txt" && head -c 200 "$OUT/stories-gpu.txt"
}
step stories260K-gpu-equals-cpu stories

# memra run on a synthesized model: generates on the GPU.
run_synth() {
	synth "$MODELS/run-qwen3-8b-q4_k_m.gguf" --preset qwen3-8b --quant q4_k_m --layers 2 --weights blocks || return 1
	"$BIN" run "$MODELS/run-qwen3-8b-q4_k_m.gguf" --device cuda --temperature 0 --max-tokens 32 --prompt "Once upon a time" >"$OUT/run-synth.txt" &&
		[ -s "$OUT/run-synth.txt" ] && head -c 200 "$OUT/run-synth.txt"
}
step run-synth-gpu run_synth
fi

# CPU↔GPU: 128 greedy steps, 2 prompts batched, 2 layers of width 512 (the full-width CPU
# reference does not fit a call). The exact configuration (f32 KV cache, f32 prefill) must agree
# token for token; the default one is reported with its worst near-tie gap.
quants="q4_k_m q8_0 bf16"
presets="llama3-8b qwen2.5-7b qwen3-8b"
[ "$MODE" = quick ] && quants="q4_k_m" && presets="qwen3-8b"
has parity && for p in $presets; do
	for q in $quants; do
		step "parity-exact-$p-$q" "$BIN" gpu-parity --preset "$p" --quant "$q" --layers 2 --dim 512 --steps 128 --prompts 2 --cache f32 --prefill-gemv
		[ -n "${EXACT_ONLY:-}" ] || step "parity-default-$p-$q" "$BIN" gpu-parity --preset "$p" --quant "$q" --layers 2 --dim 512 --steps 128 --prompts 2 --tie-tol 0.02 --tie-sigma 3
	done
done

# Hugging Face transformers on the same weights (BF16 checkpoints, 2 layers of real width).
hf() {
	local dirs=()
	for p in $presets; do
		local d="$MODELS/hf-$p-bf16"
		synth "$d" --preset "$p" --quant bf16 --layers 2 --format hf || return 1
		dirs+=("$d")
	done
	python3 scripts/hf_parity.py --memra "$BIN" --device cuda --steps 64 "$@" "${dirs[@]}"
}
if has parity && [ -z "${NO_HF:-}" ]; then
	step hf-parity-exact hf --exact
	[ -n "${EXACT_ONLY:-}" ] || step hf-parity-default hf --tie-tol 0.02 --tie-sigma 3
fi

# The quantising epilogues (MEMRA_QUANT_OUT; by default on in one-sequence programs only):
# gpu-parity with none, each alone (in batch programs too), all of them, and all of them
# without programmatic dependent launch.
if [ "$MODE" = quantout ]; then
	for v in 0 norm,batch attn,batch swiglu 1 "1 MEMRA_PDL=off"; do
		for p in 1 2; do
			step "quantout-${v// /-}-p$p" env MEMRA_QUANT_OUT=$v "$BIN" gpu-parity --preset llama3-8b --quant q4_k_m --layers 2 --dim 512 --steps 64 --prompts $p --tie-tol 0.02 --tie-sigma 3
		done
	done
fi

# autotune of the int8 decode products with the end-to-end confirmation (autotune --confirm):
# the confirm lines say which groups were kept; a bench with the user tunedb it wrote follows.
# NVRTC compiles from several goroutines (MEMRA_NVRTC_PARALLEL=1) where its concurrency test passes
# first; TUNE_TASKS limits the tasks (autotune --tasks, e.g. '_k[0-9]+(_res)?$' for the one-row ones).
if [ "$MODE" = tune ]; then
	par=0
	step tune-nvrtc sh -c 'cd runtime/cuda && MEMRA_NVRTC_PARALLEL=1 ../../.gpu/cuda.test -test.v -test.count=1 -test.run TestNVRTCConcurrentCompile' && par=1
	tune() {
		synth "$MODELS/llama2-7b-q4_k_m.gguf" --preset llama2-7b --quant q4_k_m --weights blocks || return 1
		MEMRA_NVRTC_PARALLEL=$par "$BIN" autotune "$MODELS/llama2-7b-q4_k_m.gguf" --families gemv ${TUNE_TASKS:+--tasks "$TUNE_TASKS"} --budget "${TUNE_BUDGET:-180s}" --parallel 16 --report /tmp/memra-tune-report &&
			tar czf "$OUT/tune-report.tgz" -C /tmp memra-tune-report &&
			"$BIN" tunedb export "$TUNEDB_KEY" -o "$OUT/tune-tunedb.json" &&
			{ grep '^confirm:' "$OUT/tune.log" >&2 || true; } &&
			"$BIN" bench "$MODELS/llama2-7b-q4_k_m.gguf" --device cuda --roofline -p 512 -n 128 -r 5 -b 1,16 --no-progress --perf-rows
	}
	step tune tune
fi

# autotune of the f16 decode products (one warp a row untuned; no H200 entries yet) of the 1B and
# 7B f16 models (TUNE_F16=llama3.2-1b, the default, or llama2-7b), with the end-to-end confirmation: batch 1 before, then with what was kept,
# then with MEMRA_DECODE_PRELOAD=1 too: the f16 goals (1,000 tok/s for the 1B, 75 % of the
# roofline for the 7B).
if [ "$MODE" = tune-f16 ]; then
	tune_f16() { # tune_f16 PRESET FILE
		synth "$MODELS/$2" --preset "$1" --quant f16 --weights blocks || return 1
		"$BIN" bench "$MODELS/$2" --device cuda --roofline -p 512 -n 128 -r 5 -b 1 --no-progress --perf-rows &&
			"$BIN" autotune "$MODELS/$2" --families gemv --budget "${TUNE_BUDGET:-120s}" --parallel 16 --report /tmp/memra-tune-f16-report &&
			tar czf "$OUT/tune-f16-$1-report.tgz" -C /tmp memra-tune-f16-report &&
			"$BIN" tunedb export "$TUNEDB_KEY" -o "$OUT/tune-f16-$1-tunedb.json" &&
			{ grep '^confirm:' "$OUT/tune-f16-$1.log" >&2 || true; } &&
			"$BIN" bench "$MODELS/$2" --device cuda --roofline -p 512 -n 128 -r 5 -b 1 --no-progress --perf-rows &&
			MEMRA_DECODE_PRELOAD=1 "$BIN" bench "$MODELS/$2" --device cuda -p 512 -n 128 -r 5 -b 1 --no-progress --perf-rows
	}
	# one model a call (about 4 minutes for the 1B, 6 for the 7B): TUNE_F16=llama2-7b for the other
	m=${TUNE_F16:-llama3.2-1b}
	step "tune-f16-$m" tune_f16 "$m" "$m-f16.gguf"
fi

# The int8 tensor-core batch product (XQ 3) with one, two and four tiles of 16 weight rows a
# warp: kernel-check (checks and µs) and batch-16 decode of llama2-7b q4_k_m with each, against
# the CUDA-core default.
if [ "$MODE" = xq3 ]; then
	arms="t256_r8_u1_s1_l1_g16_w2 t256_r1_u1_s1_l1_m16_w2 t512_r2_u1_s1_l1_m16_w2 t256_r1_u1_s1_l1_m16 t128_r1_u1_s1_l1_m16_w2"
	step xq3-kernel-check "$BIN" kernel-check --shapes llama3-8b --types q4_k,q6_k --only gemv --gemv-arms "${arms// /,}" --reps 10
	xq3_bench() {
		synth "$MODELS/llama2-7b-q4_k_m.gguf" --preset llama2-7b --quant q4_k_m --weights blocks || return 1
		MEMRA_GEMV_BATCH=$1 "$BIN" bench "$MODELS/llama2-7b-q4_k_m.gguf" --device cuda -p 512 -n 128 -r 3 -b 16 --no-progress --perf-rows
	}
	for a in $arms; do step "xq3-b16-$a" xq3_bench "$a"; done
fi

# The third kernel of repacked products (Launch.Large, from 16 rows): kernel-check of the products
# (Q4_K and Q6_K, checks with short timings), CPU parity at 16 sequences, batch 1 and 16 (N = 5),
# parity at 3, the batch sweep with the defaults and its plot, and batch 16 without it.
if [ "$MODE" = large ]; then
	large_bench() {
		synth "$MODELS/llama2-7b-q4_k_m.gguf" --preset llama2-7b --quant q4_k_m --weights blocks || return 1
		"$BIN" bench "$MODELS/llama2-7b-q4_k_m.gguf" --device cuda --roofline --no-progress --perf-rows "$@"
	}
	large_parity() {
		"$BIN" gpu-parity --preset llama3-8b --quant q4_k_m --layers 2 --dim 512 --steps 64 --prompts "$1" --tie-tol 0.02 --tie-sigma "$(sigma "$1")"
	}
	step large-kernel-check "$BIN" kernel-check --shapes llama3-8b --types q4_k,q6_k --only gemv --reps 3
	step large-parity-p16 large_parity 16
	step large-b16 large_bench -p 512 -n 128 -r 5 -b 1,16
	step large-parity-p3 large_parity 3
	step large-sweep large_bench -p 128 -n 32 -r 3 -b 1,2,4,8,16,32,64 --plot "$OUT/batch-sweep.svg"
	step large-off-b16 env MEMRA_GEMV_LARGE=off "$BIN" bench "$MODELS/llama2-7b-q4_k_m.gguf" --device cuda --roofline --no-progress --perf-rows -p 512 -n 128 -r 3 -b 16
fi

# The launch-saving switch rope (MEMRA_ROPE_IN_PRODUCT=1, RoPE and the KV write in the QKV
# products' epilogue in every decode program): kernel-check of the kernels, the CUDA tests, parity
# at 1, 2 and 16 sequences, and batch 1 and 16 with the switch against without.
model_bench() { # model_bench PRESET QUANT RUNS BATCHES ENV…: tg128 after 512-token prompts of a synthesized model, with the switches ENV
	local p=$1 q=$2 n=$3 batches=$4
	shift 4
	synth "$MODELS/$p-$q.gguf" --preset "$p" --quant "$q" --weights blocks || return 1
	env "$@" "$BIN" bench "$MODELS/$p-$q.gguf" --device cuda --roofline --no-progress --perf-rows -p 512 -n 128 -r "$n" -b "$batches"
}
switch_bench() { # switch_bench BATCHES ENV…: bench llama2-7b q4_k_m with the switches ENV
	local batches=$1
	shift
	model_bench llama2-7b q4_k_m 5 "$batches" "$@"
}
switch_checks() { # switch_checks NAME ENV…: the CUDA tests and parity with the switches ENV; fails if any does
	local name=$1 rc=0
	shift
	(cd runtime/cuda && env "$@" ../../.gpu/cuda.test -test.v -test.count=1 -test.run 'TestGPUSynthParity|TestGPUBatchEqualsAlone|TestGPUGraphsEqualPlain|TestGPUPrefillBLAS|TestGPUStories') >"$OUT/$name-cuda-tests.log" 2>&1 || rc=1
	for p in 1 2 16; do
		env "$@" "$BIN" gpu-parity --preset llama3-8b --quant q4_k_m --layers 2 --dim 512 --steps 64 --prompts $p --tie-tol 0.02 --tie-sigma "$(sigma $p)" >"$OUT/$name-parity-p$p.log" 2>&1 || rc=1
	done
	return $rc
}
if [ "$MODE" = rope ]; then
	step rope-kernel-check "$BIN" kernel-check --shapes llama3-8b,tiny --types q4_k,q6_k,q8_0 --only rope --reps 10
	step rope-checks switch_checks rope MEMRA_ROPE_IN_PRODUCT=1
	step rope-bench-on switch_bench 1,16 MEMRA_ROPE_IN_PRODUCT=1
	step rope-bench-off switch_bench 1,16 MEMRA_ROPE_IN_PRODUCT=0
fi

# The one-row products that split K over two warps a row set (MEMRA_GEMV_SPLIT; by default those
# of fewer blocks than the card has multiprocessors): kernel-check of split arms against the CPU,
# parity with the default and with the split off, and batch 1 with the default, off, and split
# only for the 4096-row products with long rows (K ≥ 8192).
if [ "$MODE" = split ]; then
	step split-kernel-check "$BIN" kernel-check --shapes llama3-8b --types q4_k,q6_k --only gemv/ \
		--gemv-arms t512_r8_u1_s1_l1_g1_w4,t512_r8_u1_s1_l1_g1_w2,t256_r4_u1_s1_l1_g1_w4 --reps 10
	for v in 512 off; do
		for p in 1 2; do
			step "split-$v-parity-p$p" env MEMRA_GEMV_SPLIT=$v "$BIN" gpu-parity --preset llama3-8b --quant q4_k_m --layers 2 --dim 512 --steps 64 --prompts $p --tie-tol 0.02 --tie-sigma 3
		done
	done
	step split-bench-default switch_bench 1 MEMRA_NOTHING=0
	step split-bench-off switch_bench 1 MEMRA_GEMV_SPLIT=off
	step split-bench-longk switch_bench 1 MEMRA_GEMV_SPLIT=4096/8192
fi

# Decode attention reading its first keys before its dependency wait, the kernel before it
# triggering it early (MEMRA_DECODE_PRELOAD=1, off by default until this has passed): kernel-check
# of the preload cases, the CUDA tests and parity at 1, 2 and 16 sequences with it, then batch 1 and
# 16 with and without. About 5 minutes; `tune-f16` times the f16 models with and without it.
if [ "$MODE" = preload ]; then
	step preload-kernel-check "$BIN" kernel-check --shapes llama3-8b,qwen3-8b --types q4_k --only attn_decode --reps 10
	step preload-checks switch_checks preload MEMRA_DECODE_PRELOAD=1
	step preload-bench-on switch_bench 1,16 MEMRA_DECODE_PRELOAD=1
	step preload-bench-off switch_bench 1,16 MEMRA_NOTHING=0
fi

# Batch 1's decode attention in one pass (about 2 minutes): kernel-check of decode attention (its
# preload and Live 3 cases among them, checks only), then llama2-7b q4_k_m at batch 1 with the
# defaults, N = 5.
if [ "$MODE" = b1 ]; then
	step b1-kernel-check-attn "$BIN" kernel-check --shapes llama3-8b,qwen2.5-7b --types q4_k --only attn_decode --reps 0
	step b1-default switch_bench 1 MEMRA_NOTHING=0
fi

# Decode attention splits sized by the card's multiprocessors (MEMRA_DECODE_LIVE=3, not yet run):
# kernel-check, the CUDA tests and parity with it, then batch 1 and 16 against the default live
# arm (2) at bench's own cache (prompt + generation) and at the 4096 positions a server allocates
# (where Live 2 spreads 600 keys over 20 splits of 32).
if [ "$MODE" = live3 ]; then
	step live3-kernel-check "$BIN" kernel-check --shapes llama3-8b,qwen2.5-7b --types q4_k --only attn_decode --reps 10
	step live3-checks switch_checks live3 MEMRA_DECODE_LIVE=3
	ctx_bench() { # ctx_bench CONTEXT ENV…
		local c=$1
		shift
		synth "$MODELS/llama2-7b-q4_k_m.gguf" --preset llama2-7b --quant q4_k_m --weights blocks || return 1
		env "$@" "$BIN" bench "$MODELS/llama2-7b-q4_k_m.gguf" --device cuda --no-progress --perf-rows -p 512 -n 128 -r 5 -b 1,16 --context "$c"
	}
	for c in 0 4096; do
		step "live3-bench-ctx$c-live2" ctx_bench $c MEMRA_NOTHING=0
		step "live3-bench-ctx$c-live3" ctx_bench $c MEMRA_DECODE_LIVE=3
	done
fi

# The pipelined prefill product (codegen.MMAArm Pipe 1: two shared buffers of K tiles of 64, not
# yet run): kernel-check of its arms against the CPU, parity at 2 sequences with it, then pp512 of
# llama2-7b q4_k_m and f16 with the default arm and two pipelined ones (MEMRA_MMA; bench
# --roofline times its bf16 reference with the same arm, so compare the tok/s).
if [ "$MODE" = mma-pipe ]; then
	step mma-pipe-kernel-check "$BIN" kernel-check --shapes llama3-8b --types q4_k,q6_k,q8_0,f16,bf16 --only mma --reps 10
	for a in m128_n128_w2x4_p1 m64_n64_w2x2_p1; do
		step "mma-pipe-parity-$a" env MEMRA_MMA=$a "$BIN" gpu-parity --preset llama3-8b --quant q4_k_m --layers 2 --dim 512 --steps 64 --prompts 2 --tie-tol 0.02 --tie-sigma 3
	done
	pp_bench() { # pp_bench QUANT ENV…
		local q=$1
		shift
		synth "$MODELS/llama2-7b-$q.gguf" --preset llama2-7b --quant "$q" --weights blocks || return 1
		env "$@" "$BIN" bench "$MODELS/llama2-7b-$q.gguf" --device cuda --roofline --no-progress --perf-rows -p 512 -n 0 -r 5
	}
	for q in q4_k_m f16; do
		step "mma-pipe-pp-$q-default" pp_bench $q MEMRA_NOTHING=0
		for a in m128_n128_w2x4_p1 m64_n64_w2x2_p1; do
			step "mma-pipe-pp-$q-$a" pp_bench $q MEMRA_MMA=$a
		done
	done
fi

# The defaults as they stand, checked and timed in one call (about 8 minutes): kernel-check of the
# prefill product's arms and decode attention, the CUDA tests and parity at 1, 2 and 16 sequences,
# then llama2-7b q4_k_m at batch 1 and 16 (pp512 with the default and the 8-warp prefill arm) and the
# 1B f16 model at batch 1. It also says where cuBLASLt is on the machine (cublas.txt).
if [ "$MODE" = defaults ]; then
	{ ls /usr/local/cuda*/lib64/libcublasLt.so* /usr/local/cuda*/targets/x86_64-linux/lib/libcublasLt.so* 2>/dev/null
		find / -xdev -name 'libcublasLt.so*' 2>/dev/null | head; } >"$OUT/cublas.txt"
	step defaults-kernel-check-mma "$BIN" kernel-check --shapes llama3-8b --types q4_k,q6_k,f16 --only mma --reps 5
	step defaults-kernel-check-attn "$BIN" kernel-check --shapes llama3-8b --types q4_k --only attn_decode --reps 5
	step defaults-kernel-check-flash "$BIN" kernel-check --shapes llama3-8b,qwen2.5-7b,tiny --types q4_k --only attn_ --reps 5
	step defaults-checks switch_checks defaults MEMRA_NOTHING=0
	step defaults-bench-q4 switch_bench 1,16 MEMRA_NOTHING=0
	step defaults-pp-q4-w2x4 env MEMRA_MMA=m64_n128_w2x4_p1 "$BIN" bench "$MODELS/llama2-7b-q4_k_m.gguf" --device cuda --roofline --no-progress --perf-rows -p 512 -n 0 -r 5
	f16_bench() {
		synth "$MODELS/llama3.2-1b-f16.gguf" --preset llama3.2-1b --quant f16 --weights blocks || return 1
		"$BIN" bench "$MODELS/llama3.2-1b-f16.gguf" --device cuda --roofline --no-progress --perf-rows -p 512 -n 128 -r 5 -b 1
	}
	step defaults-bench-1b-f16 f16_bench
	step defaults-pp-q4-warp env MEMRA_ATTN_PREFILL=warp "$BIN" bench "$MODELS/llama2-7b-q4_k_m.gguf" --device cuda --roofline --no-progress --perf-rows -p 512 -n 0 -r 5
	step defaults-7b-f16 sh -c '"$0" synth --quiet --preset llama2-7b --quant f16 --weights blocks -o "$1" && "$0" bench "$1" --device cuda --roofline --no-progress --perf-rows -p 512 -n 128 -r 5 -b 1' "$BIN" "$MODELS/llama2-7b-f16.gguf"
fi

# Prefill products through cuBLASLt (MEMRA_PREFILL=blas): its CUDA test (the same greedy tokens
# as the generated product), CPU parity with it and with the 8-warp generated arm, then pp512 of
# llama2-7b q4_k_m (default, blas, the 8-warp arm), the 1B f16 (default, blas) and llama2-7b f16
# (blas, and tg128 with the defaults). --roofline measures cuBLASLt's own 8192³ product as the
# reference where the library is found. About 8 minutes.
if [ "$MODE" = blas ]; then
	step blas-cuda-tests sh -c 'cd runtime/cuda && ../../.gpu/cuda.test -test.v -test.count=1 -test.run "TestGPUPrefillBLAS|TestLowerSynthCompiles"'
	step blas-parity-p2 env MEMRA_PREFILL=blas "$BIN" gpu-parity --preset llama3-8b --quant q4_k_m --layers 2 --dim 512 --steps 64 --prompts 2 --tie-tol 0.02 --tie-sigma 3
	step blas-parity-w2x4-p2 env MEMRA_MMA=m64_n128_w2x4_p1 "$BIN" gpu-parity --preset llama3-8b --quant q4_k_m --layers 2 --dim 512 --steps 64 --prompts 2 --tie-tol 0.02 --tie-sigma 3
	pp_of() { # pp_of PRESET QUANT GEN ENV…
		local p=$1 q=$2 n=$3
		shift 3
		synth "$MODELS/$p-$q.gguf" --preset "$p" --quant "$q" --weights blocks || return 1
		env "$@" "$BIN" bench "$MODELS/$p-$q.gguf" --device cuda --roofline --no-progress --perf-rows -p 512 -n "$n" -r 5
	}
	step blas-pp-q4-blas pp_of llama2-7b q4_k_m 0 MEMRA_PREFILL=blas
	step blas-pp-q4-mma pp_of llama2-7b q4_k_m 0 MEMRA_PREFILL=mma
	step blas-pp-q4-w2x4 pp_of llama2-7b q4_k_m 0 MEMRA_PREFILL=mma MEMRA_MMA=m64_n128_w2x4_p1
	step blas-pp-1b-blas pp_of llama3.2-1b f16 0 MEMRA_PREFILL=blas
	step blas-pp-1b-w2x4 pp_of llama3.2-1b f16 0 MEMRA_PREFILL=mma MEMRA_MMA=m64_n128_w2x4_p1
	step blas-7b-f16-blas pp_of llama2-7b f16 128 MEMRA_PREFILL=blas
fi

# F16-weight prefill products through cuBLASLt on f16 operands (no dequantising launch): the CUDA
# tests, CPU parity of an f16 and a q4_k_m model at 2 sequences, then pp512 of llama2-7b f16 and of
# the 1B f16 (cuBLASLt's bf16 8192³ the reference). About 4 minutes.
if [ "$MODE" = f16-prefill ]; then
	step f16p-cuda-tests sh -c 'cd runtime/cuda && ../../.gpu/cuda.test -test.v -test.count=1 -test.run "TestGPUPrefillBLAS|TestGPUSynthParity|TestGPUBatchEqualsAlone"'
	for q in f16 q4_k_m; do
		step "f16p-parity-$q-p2" "$BIN" gpu-parity --preset llama3-8b --quant $q --layers 2 --dim 512 --steps 64 --prompts 2 --tie-tol 0.02 --tie-sigma 3
	done
	for p in llama2-7b llama3.2-1b; do
		step "f16p-pp-$p" sh -c '"$0" synth --quiet --preset "$2" --quant f16 --weights blocks -o "$1" && "$0" bench "$1" --device cuda --roofline --no-progress --perf-rows -p 512 -n 0 -r 5' "$BIN" "$MODELS/$p-f16.gguf" "$p"
	done
fi

# The serving load test alone (about 3 minutes): memra serve on llama2-7b q4_k_m and memra bench serve
# at concurrency 1, 4, 16, 64 (scripts/gpu-bench.sh's serve_bench), then the batch sweep with its plot.
# SERVE_LEVELS and SERVE_DURATION set the levels and their length; SERVE_SWEEP=0 skips the sweep.
# NVRTC from several goroutines (MEMRA_NVRTC_PARALLEL=1, NVRTC 12 and later): the CUDA test that
# compiles eight int8 product kernels one at a time and all at once (times in its log), then a
# one-minute autotune of the llama3-8b Q4_K products without a model (how many arms a task
# reaches in its share of the budget; nothing written).
if [ "$MODE" = nvrtc ]; then
	step nvrtc-concurrent sh -c 'cd runtime/cuda && MEMRA_NVRTC_PARALLEL=1 ../../.gpu/cuda.test -test.v -test.count=1 -test.run TestNVRTCConcurrentCompile'
	step nvrtc-autotune env MEMRA_NVRTC_PARALLEL=1 "$BIN" autotune --shapes llama3-8b --types q4_k --families gemv --budget "${TUNE_BUDGET:-60s}" --parallel 16 --write-user=false
	grep -h 'NVRTC' "$OUT/nvrtc-concurrent.log" >&2
	tr '\r' '\n' <"$OUT/nvrtc-autotune.log" | grep -E 'tried' >&2
fi

# Sampling on the device (issue 31): the sampling kernel against the CPU sampler and its Go mirror
# (distributions, seeded draws, greedy, logprobs, codes, a 128k vocabulary) and its time at 1, 16 and
# 64 sequences (in the log), the backend's StepSample (greedy equals StepGreedy, seeded runs repeat,
# logprobs), then stories260K sampled twice with one seed on the GPU: the same text both times.
if [ "$MODE" = sample ]; then
	step sample-cuda-tests sh -c 'cd runtime/cuda && ../../.gpu/cuda.test -test.v -test.count=1 -test.run "TestGPUSampleKernel|TestGPUStepSample|TestSampleMirror|TestSamplePack"'
	seeded() {
		"$BIN" run --device cuda --temperature 0.8 --top-k 40 --top-p 0.95 --seed 7 --max-tokens 100 >"$OUT/sample-a.txt" 2>/dev/null &&
			"$BIN" run --device cuda --temperature 0.8 --top-k 40 --top-p 0.95 --seed 7 --max-tokens 100 >"$OUT/sample-b.txt" 2>/dev/null &&
			cmp "$OUT/sample-a.txt" "$OUT/sample-b.txt" && head -c 200 "$OUT/sample-a.txt"
	}
	step sample-seeded-run seeded
	grep -h 'sequences:' "$OUT/sample-cuda-tests.log" >&2
fi

# Issue 6's decode goals in one call, with the shipped tunedb: llama2-7b q4_k_m at batch 1 and 16,
# llama2-7b f16 and llama3.2-1b f16 at batch 1 (tg128 after a 512-token prompt, N = 5, with the
# roofline), CPU parity of a two-layer llama3.2-1b f16 (its full-width products take the tuned f16
# arms), then the serving load test below (GOALS_SERVE=0 skips it).
if [ "$MODE" = goals ]; then
	step goals-q4_k_m-b1-b16 model_bench llama2-7b q4_k_m 5 1,16
	step goals-1b-f16-b1 model_bench llama3.2-1b f16 5 1
	step goals-7b-f16-b1 model_bench llama2-7b f16 5 1
	step goals-parity-1b-f16 "$BIN" gpu-parity --preset llama3.2-1b --quant f16 --layers 2 --dim 2048 --steps 64 --prompts 2 --tie-tol 0.02 --tie-sigma 3
	[ "${GOALS_SERVE:-1}" = 0 ] || { serve_on=1; SERVE_SWEEP=0; }
fi

[ "$MODE" = serve ] && serve_on=1
if [ "${serve_on:-0}" = 1 ]; then
	synth "$MODELS/llama2-7b-q4_k_m.gguf" --preset llama2-7b --quant q4_k_m --weights blocks
	serve_load() {
		"$BIN" serve --model "llama2-7b-q4_k_m=$MODELS/llama2-7b-q4_k_m.gguf" --device cuda --port 8199 --max-running 64 >"$OUT/serve.log" 2>&1 &
		local pid=$! i rc
		for i in $(seq 1 120); do
			(exec 3<>/dev/tcp/127.0.0.1/8199) 2>/dev/null && break
			kill -0 $pid 2>/dev/null || return 1
			sleep 1
		done
		"$BIN" bench serve --url http://127.0.0.1:8199 --endpoint completions --concurrency "${SERVE_LEVELS:-1,4,16,64}" --duration "${SERVE_DURATION:-20s}" --out "$OUT/serve-bench"
		rc=$?
		kill -TERM $pid
		wait $pid
		return $rc
	}
	step serve-load serve_load
	[ "${SERVE_SWEEP:-1}" = 0 ] || step serve-sweep "$BIN" bench "$MODELS/llama2-7b-q4_k_m.gguf" --device cuda --roofline -p 128 -n 32 -r 3 -b 1,2,4,8,16,32,64 --no-progress --perf-rows --plot "$OUT/batch-sweep.svg"
fi

# What each kernel class costs inside the batch-1 decode graph: llama2-7b q4_k_m with the class's
# launches left out (MEMRA_DROP; the tokens are wrong, the timing is the point). The cost of a
# class is 1/(tok/s) with it less 1/(tok/s) without.
if [ "$MODE" = drop ]; then
	step drop-none switch_bench 1 MEMRA_NOTHING=0
	for re in '^attn_' n4096_k4096_res _rope_ n22016 k11008 n32000; do
		step "drop-${re//[^a-z0-9_]/}" switch_bench 1 "MEMRA_DROP=$re"
	done
fi

# The same for the f16 models' small kernels (DROP_F16 names the preset, default llama3.2-1b):
# the norms, the SwiGLU and the RoPE launches each left out, all three, attention, and the fused
# float prologues (MEMRA_FUSE=1) against the default, N = 3 after a baseline of N = 5.
if [ "$MODE" = drop-f16 ]; then
	m=${DROP_F16:-llama3.2-1b}
	f16_switch() { # f16_switch N ENV…
		local n=$1
		shift
		model_bench "$m" f16 "$n" 1 "$@"
	}
	step drop-f16-none f16_switch 5 MEMRA_NOTHING=0
	step drop-f16-rmsnorm f16_switch 3 MEMRA_DROP='^rmsnorm'
	step drop-f16-swiglu f16_switch 3 MEMRA_DROP='^swiglu'
	step drop-f16-rope f16_switch 3 MEMRA_DROP='^rope_kv'
	step drop-f16-small3 f16_switch 3 MEMRA_DROP='^rmsnorm|^swiglu|^rope_kv'
	step drop-f16-attn f16_switch 3 MEMRA_DROP='^attn_'
	step drop-f16-fuse1 f16_switch 3 MEMRA_FUSE=1
fi

# Where a decode step's time goes with the defaults: llama2-7b q4_k_m at batch 1 and 16, with the
# roofline, then each kernel of one step timed (bench --profile: plain launches, no PDL).
if [ "$MODE" = profile ]; then
	profile() {
		synth "$MODELS/llama2-7b-q4_k_m.gguf" --preset llama2-7b --quant q4_k_m --weights blocks || return 1
		"$BIN" bench "$MODELS/llama2-7b-q4_k_m.gguf" --device cuda --roofline -p 512 -n 128 -r 5 -b "$1" --no-progress --perf-rows --profile
	}
	step profile-b1 profile 1
	step profile-b16 profile 16
fi

# Nsight Compute on a short decode of llama2-7b q4_k_m (each kernel replayed alone, clocks left
# as they are): duration, DRAM throughput, registers, occupancy and waves per launch.
if [ "$MODE" = ncu ]; then
	ncu_run() { # ncu_run NAME REGEX SKIP COUNT BATCH
		synth "$MODELS/llama2-7b-q4_k_m.gguf" --preset llama2-7b --quant q4_k_m --weights blocks || return 1
		ncu --clock-control none --target-processes all --section SpeedOfLight --section LaunchStats --section Occupancy \
			--csv --page details -k "regex:$2" --launch-skip "$3" --launch-count "$4" \
			"$BIN" bench "$MODELS/llama2-7b-q4_k_m.gguf" --device cuda -p 8 -n 2 -r 1 -b "$5" --no-progress >"$OUT/$1.csv" &&
			python3 scripts/ncu_summary.py "$OUT/$1.csv"
	}
	step ncu-b1-products ncu_run ncu-b1-products g1_w 0 12 1
	step ncu-attention ncu_run ncu-attention 'attn_part|attn_combine' 0 6 1
	step ncu-b16-products ncu_run ncu-b16-products 'm16_w|g16_w' 0 8 16
fi

# Speed: scripts/gpu-bench.sh (bench with --roofline, batch sweep, tuned vs untuned).
# The f16 tensor-core batch product (XQ 4, MEMRA_GEMV_LARGE=half or an h arm; the default since
# session 16): kernel-check of its arms beside the int8 arm (llama3-8b shapes, Q4_K and Q6_K, the XHalf
# rows with the norm and SwiGLU prologues too), parity at 16 sequences, batch 1 and 16 of llama2-7b
# q4_k_m with the int8 arm (MEMRA_GEMV_LARGE=int8) and with half (N = 5), a profile of a batch-16 step with half; then
# (not with HALF_QUICK=1) batch 16 with
# each arm as the large arm (N = 3) and, with the fastest (or HALF_PARITY), parity at 32
# sequences, the CUDA batch tests and 16, 32, 64 sequences.
if [ "$MODE" = half ]; then
	# most telling first, so that a call cut short keeps it: the kernels against the CPU, parity at
	# 16 sequences and the goal runs (batch 1 and 16, N = 5) of the int8 default and the f16 one
	arms=${HALF_ARMS:-"t512_r1_u2_s1_l1_h16_w2_p2 t256_r1_u2_s1_l1_h16_w2_p2 t512_r1_u2_s1_l1_h16_w4_p2"}
	step half-kernel-check "$BIN" kernel-check --shapes llama3-8b --types q4_k,q6_k --only gemv --gemv-arms "${arms// /,},t512_r1_u2_s1_l1_m16_w2_p2" --reps 10
	step half-parity-p16 env MEMRA_GEMV_LARGE=half "$BIN" gpu-parity --preset llama3-8b --quant q4_k_m --layers 2 --dim 512 --steps 64 --prompts 16 --tie-tol 0.02 --tie-sigma "$(sigma 16)"
	step half-int8-b1-b16 switch_bench 1,16 MEMRA_GEMV_LARGE=int8
	step half-half-b1-b16 switch_bench 1,16 MEMRA_GEMV_LARGE=half
	# where a batch-16 step goes with it: each kernel of one step timed (plain launches, no PDL)
	step half-profile-b16 env MEMRA_GEMV_LARGE=half "$BIN" bench "$MODELS/llama2-7b-q4_k_m.gguf" --device cuda -p 512 -n 16 -r 1 -b 16 --no-progress --profile
	[ -n "${HALF_QUICK:-}" ] && arms=
	half_bench() {
		synth "$MODELS/llama2-7b-q4_k_m.gguf" --preset llama2-7b --quant q4_k_m --weights blocks || return 1
		MEMRA_GEMV_LARGE=$1 "$BIN" bench "$MODELS/llama2-7b-q4_k_m.gguf" --device cuda -p 512 -n 128 -r 3 -b 16 --no-progress --perf-rows
	}
	for a in $arms; do step "half-b16-$a" half_bench "$a"; done
	pa=${HALF_PARITY:-$(for a in $arms; do
		grep -E '^\| 2.*tg128' "$OUT/half-b16-$a.log" | awk -F'|' -v a="$a" '{gsub(/ /, "", $9); print $9, a}'
	done | sort -rn | head -1 | cut -d' ' -f2)}
	if [ -n "$pa" ]; then
		echo "half: fastest arm $pa" >&2
		step "half-parity-p32-$pa" env MEMRA_GEMV_LARGE="$pa" "$BIN" gpu-parity --preset llama3-8b --quant q4_k_m --layers 2 --dim 512 --steps 64 --prompts 32 --tie-tol 0.02 --tie-sigma "$(sigma 32)"
		step half-cuda-tests env MEMRA_GEMV_LARGE="$pa" sh -c 'cd runtime/cuda && ../../.gpu/cuda.test -test.v -test.count=1 -test.run "TestGPUBatchEqualsAlone|TestGPUGraphsEqualPlain|TestGPUSynthParity"'
		step "half-sweep-$pa" model_bench llama2-7b q4_k_m 3 16,32,64 MEMRA_GEMV_LARGE="$pa"
	fi
fi

# The f16 large arm as the default (about 8 minutes, most telling first): batch 1 and 16 of
# llama2-7b q4_k_m with the defaults (N = 5), batch 16 with the int8 arm (N = 3, the same call's
# baseline), parity at 16 and 32 sequences, batch 16 with the 8-warp f16 arm, the batch sweep with
# its plot, then kernel-check of more f16 arms (Q4_K, timed: which geometry next).
if [ "$MODE" = halfdef ]; then
	step halfdef-b1-b16 switch_bench 1,16
	step halfdef-int8-b16 model_bench llama2-7b q4_k_m 3 16 MEMRA_GEMV_LARGE=int8
	for p in 16 32; do
		step "halfdef-parity-p$p" "$BIN" gpu-parity --preset llama3-8b --quant q4_k_m --layers 2 --dim 512 --steps 64 --prompts $p --tie-tol 0.02 --tie-sigma "$(sigma $p)"
	done
	step halfdef-t256-b16 model_bench llama2-7b q4_k_m 3 16 MEMRA_GEMV_LARGE=t256_r1_u2_s1_l1_h16_w2_p2
	step halfdef-sweep "$BIN" bench "$MODELS/llama2-7b-q4_k_m.gguf" --device cuda -p 128 -n 32 -r 3 -b 1,2,4,8,16,32,64 --no-progress --perf-rows --plot "$OUT/batch-sweep.svg"
	harms=${HALFDEF_ARMS:-t256_r1_u2_s1_l1_h16_w2_p2,t256_r2_u2_s1_l1_h16_w2_p2,t512_r2_u2_s1_l1_h16_w2_p2,t256_r1_u2_s1_l1_h16_w2_p4,t256_r1_u1_s1_l1_h16_w2_p4,t128_r1_u2_s1_l1_h16_w2_p2,t256_r1_u2_s1_l1_h16_w1_p2}
	step halfdef-kernel-check "$BIN" kernel-check --shapes llama3-8b --types q4_k --only gemv --gemv-arms "$harms" --reps 10
fi

# from: the f16 tensor-core products below 16 rows (MEMRA_GEMV_LARGE_FROM). On an H200 first the
# defaults at batch 1 and 16 (N = 5, the goal's figures); kernel-check of the Q4_K and Q6_K products
# (the f16 arms at 1, 4 and 12 rows: tiles of tokens past the block's rows are skipped); parity at 4
# and 8 sequences and the CUDA batch tests with the f16 products from 2 rows; then batches 2 to 12
# of llama2-7b q4_k_m with them from 16 rows (the batch arm below) and from 2, and tg128@512 at 4
# and 8 with each (N = 3).
if [ "$MODE" = from ]; then
	grep -q H200 "$OUT/gpu.txt" && step from-b1-b16 switch_bench 1,16
	step from-kernel-check "$BIN" kernel-check --shapes llama3-8b --types q4_k,q6_k --only gemv --gemv-arms t256_r1_u2_s1_l1_h16_w2_p2 --reps 5
	for p in 4 8; do
		step "from-parity-p$p" env MEMRA_GEMV_LARGE_FROM=2 "$BIN" gpu-parity --preset llama3-8b --quant q4_k_m --layers 2 --dim 512 --steps 64 --prompts $p --tie-tol 0.02 --tie-sigma "$(sigma $p)"
	done
	step from-cuda-tests bash -c 'cd runtime/cuda && MEMRA_GEMV_LARGE_FROM=2 ../../.gpu/cuda.test -test.v -test.count=1 -test.run "TestGPUBatchEqualsAlone|TestGPUGraphsEqualPlain"'
	synth "$MODELS/llama2-7b-q4_k_m.gguf" --preset llama2-7b --quant q4_k_m --weights blocks
	for f in 16 2; do
		step "from-sweep-$f" env MEMRA_GEMV_LARGE_FROM=$f "$BIN" bench "$MODELS/llama2-7b-q4_k_m.gguf" --device cuda -p 128 -n 32 -r 3 -b 2,3,4,6,8,12 --no-progress --perf-rows --plot "$OUT/from-sweep-$f.svg"
	done
	for f in 16 4; do
		step "from-tg-$f" model_bench llama2-7b q4_k_m 3 4,8 MEMRA_GEMV_LARGE_FROM=$f
	done
fi

# fromdef: the f16 products from codegen.HalfLargeRows (3) rows as the default: the CUDA batch
# tests, parity at 4 sequences, on an H200 batch 1 and 16 (N = 5), then the batch sweep with its plot.
if [ "$MODE" = fromdef ]; then
	step fromdef-cuda-tests bash -c 'cd runtime/cuda && ../../.gpu/cuda.test -test.v -test.count=1 -test.run "TestGPUBatchEqualsAlone|TestGPUGraphsEqualPlain"'
	step fromdef-parity-p4 "$BIN" gpu-parity --preset llama3-8b --quant q4_k_m --layers 2 --dim 512 --steps 64 --prompts 4 --tie-tol 0.02 --tie-sigma "$(sigma 4)"
	grep -q H200 "$OUT/gpu.txt" && step fromdef-b1-b16 switch_bench 1,16
	synth "$MODELS/llama2-7b-q4_k_m.gguf" --preset llama2-7b --quant q4_k_m --weights blocks
	step fromdef-sweep "$BIN" bench "$MODELS/llama2-7b-q4_k_m.gguf" --device cuda -p 128 -n 32 -r 3 -b 1,2,4,8,16,32,64 --no-progress --perf-rows --plot "$OUT/batch-sweep.svg"
fi

# kv8: the 8-bit KV cache (--kv-cache q8_0: int8 with an f32 scale per 32 elements, 0.5625x the
# f16 cache's bytes). Most telling first: kernel-check of every kernel that writes or reads it (three
# shapes, checks and times) and of decode attention with the f16 cache beside it (llama3-8b), CPU
# parity with it at 1, 2 and 16 sequences, llama2-7b q4_k_m tg128@512 at batch 1 and 16 with it and
# with the f16 cache (N = 5, the same call's baseline), the CUDA batch tests with it, a profile of a batch-16 step with it, then
# (KV8_LONG=1) batch 32 and 64 with each cache (N = 3) and the batch sweep with it and its plot.
if [ "$MODE" = kv8 ]; then
	step kv8-kernel-check "$BIN" kernel-check --shapes llama3-8b,qwen2.5-7b,qwen3-8b --types q4_k --only "q8_0 cache" --reps 5
	step kv8-kernel-check-f16 "$BIN" kernel-check --shapes llama3-8b --types q4_k --only attn_decode --reps 5
	for p in 1 2 16; do
		step "kv8-parity-p$p" "$BIN" gpu-parity --preset llama3-8b --quant q4_k_m --layers 2 --dim 512 --steps 64 --prompts $p --cache q8_0 --tie-tol 0.02 --tie-sigma "$(sigma $p)"
	done
	step kv8-q8-b1-b16 switch_bench 1,16 MEMRA_KV_CACHE=q8_0
	step kv8-f16-b1-b16 switch_bench 1,16 MEMRA_KV_CACHE=f16
	step kv8-cuda-tests env MEMRA_KV_CACHE=q8_0 sh -c 'cd runtime/cuda && ../../.gpu/cuda.test -test.v -test.count=1 -test.run "TestGPUBatchEqualsAlone|TestGPUGraphsEqualPlain"'
	step kv8-profile-b16 env MEMRA_KV_CACHE=q8_0 "$BIN" bench "$MODELS/llama2-7b-q4_k_m.gguf" --device cuda -p 512 -n 16 -r 1 -b 16 --no-progress --profile
	if [ -n "${KV8_LONG:-}" ]; then
		step kv8-q8-b32-b64 model_bench llama2-7b q4_k_m 3 32,64 MEMRA_KV_CACHE=q8_0
		step kv8-f16-b32-b64 model_bench llama2-7b q4_k_m 3 32,64 MEMRA_KV_CACHE=f16
		step kv8-sweep env MEMRA_KV_CACHE=q8_0 "$BIN" bench "$MODELS/llama2-7b-q4_k_m.gguf" --device cuda -p 512 -n 128 -r 3 -b 1,2,4,8,16,32,64 --no-progress --perf-rows --plot "$OUT/kv8-sweep.svg"
	fi
fi

# kv8def: the 8-bit cache with its default of two keys in flight (about 3 minutes): kernel-check of
# its decode attention (llama3-8b, checks and times), parity at 2 and 16 sequences, then llama2-7b
# q4_k_m tg128@512 at batch 1 and 16 with it and with the f16 cache (N = 5, the same call's baseline).
if [ "$MODE" = kv8def ]; then
	step kv8def-kernel-check "$BIN" kernel-check --shapes llama3-8b --types q4_k --only "q8_0 cache" --reps 5
	for p in 2 16; do
		step "kv8def-parity-p$p" "$BIN" gpu-parity --preset llama3-8b --quant q4_k_m --layers 2 --dim 512 --steps 64 --prompts $p --cache q8_0 --tie-tol 0.02 --tie-sigma "$(sigma $p)"
	done
	step kv8def-q8-b1-b16 switch_bench 1,16 MEMRA_KV_CACHE=q8_0
	step kv8def-f16-b1-b16 switch_bench 1,16 MEMRA_KV_CACHE=f16
fi

# The weight types without a repacked layout that Q3_K_M, Q3_K_S, Q2_K and IQ4_XS files hold (Q2_K,
# Q3_K, IQ4_NL, IQ4_XS: every product on the file's layout, codegen/dequant_lowbit.go): kernel-check
# of their embedding, decode GEMV, prefill mma and gemm_small products at the three dense shapes
# (checks and times), their sm_90a/sm_120a compile gate, then CPU parity of 2-layer llama3-8b
# models of width 512 in the q3_k_m, q2_k and iq4_xs mixes at 1 and 16 sequences, in the exact and
# the default configurations. QUANT_PARTS picks parts: check parity (both by default).
if [ "$MODE" = quant ]; then
	parts=${QUANT_PARTS:-"check parity"}
	qtypes=q2_k,q3_k,iq4_nl,iq4_xs
	case " $parts " in *" check "*)
		step quant-kernel-check "$BIN" kernel-check --shapes llama3-8b,qwen2.5-7b,qwen3-8b --types $qtypes --reps "${KC_REPS:-3}"
		step quant-compile-sm90a-sm120a "$BIN" kernel-check --compile-only --arch sm_90a,sm_120a --shapes llama3-8b --types $qtypes
		;;
	esac
	case " $parts " in *" parity "*)
		for q in ${QUANT_MIXES:-q3_k_m q2_k iq4_xs}; do
			for n in 1 16; do
				step "quant-parity-exact-$q-p$n" "$BIN" gpu-parity --preset llama3-8b --quant "$q" --layers 2 --dim 512 --steps 64 --prompts $n --cache f32 --prefill-gemv
				[ -n "${EXACT_ONLY:-}" ] || step "quant-parity-default-$q-p$n" "$BIN" gpu-parity --preset llama3-8b --quant "$q" --layers 2 --dim 512 --steps 64 --prompts $n --tie-tol 0.02 --tie-sigma "$(sigma $n)"
			done
		done
		;;
	esac
fi

{ [ "$MODE" = bench ] || [ "$MODE" = full ]; } && step gpu-bench env OUT="$OUT/bench" MODELS="$MODELS" scripts/gpu-bench.sh "$BIN"

echo
echo "memra GPU battery ($(head -2 "$OUT/gpu.txt" | tail -1)), logs in $OUT"
# Gemma 2 and 3 (about 8 minutes on an H100): kernel-check of the Gemma kernels at gemma3-12b (the
# sliding window of 1024 with and without the soft cap, checks only), CPU↔GPU parity on synthesized
# gemma2-9b (2 layers: one sliding, one global) and gemma3-12b (6 layers: five sliding, one
# global) with a window of 32 (the 144 positions of a sequence cross it), in the exact and the
# default configuration, and transformers' Gemma2ForCausalLM/Gemma3ForCausalLM on the same
# weights (real width, bf16; hf_parity.py takes eager attention for them).
if [ "$MODE" = gemma ]; then
	step gemma-kernel-check "$BIN" kernel-check --shapes gemma3-12b --types q4_k,q8_0 --reps 0
	for g in gemma2-9b:2 gemma3-12b:6; do
		p=${g%:*} l=${g#*:}
		for q in q4_k_m bf16; do
			f="$MODELS/$p-$q-w32.gguf"
			synth "$f" --preset "$p" --quant "$q" --layers "$l" --dim 512 --sliding-window 32 --weights float || continue
			step "gemma-parity-exact-$p-$q" "$BIN" gpu-parity "$f" --steps 128 --prompts 2 --cache f32 --prefill-gemv
			step "gemma-parity-default-$p-$q" "$BIN" gpu-parity "$f" --steps 128 --prompts 2 --tie-tol 0.02 --tie-sigma 3
		done
	done
	gemma_hf() {
		local dirs=()
		for g in gemma2-9b:2 gemma3-12b:6; do
			local p=${g%:*} l=${g#*:} d="$MODELS/hf-${g%:*}-bf16-w32"
			synth "$d" --preset "$p" --quant bf16 --layers "$l" --sliding-window 32 --format hf || return 1
			dirs+=("$d")
		done
		python3 scripts/hf_parity.py --memra "$BIN" --device cuda --steps 64 --prompt-ids "2 651 4320 8426 25341 36271 1163 573 27894 5929" "$@" "${dirs[@]}"
	}
	step gemma-hf-exact gemma_hf --exact
	step gemma-hf-default gemma_hf --tie-tol 0.02 --tie-sigma 3
fi
printf '%s\n' "${rows[@]}"
[ -e "$OUT/gpu-bench.log" ] && grep -E '^\| 2' "$OUT/gpu-bench.log"
# The pipelined tensor-core batch arms (GEMVArm.Stages: cp.async rings in shared memory) against
# the unpipelined default: kernel-check of each (checks and times, llama3-8b shapes, Q4_K and Q6_K),
# batch 16 decode of llama2-7b q4_k_m with each as the large arm, then parity at 16 sequences and
# batch 1 and 16 (N = 5) with XQ3P_PARITY (default the fastest of them).
if [ "$MODE" = xq3p ]; then
	arms=${XQ3P_ARMS:-"t512_r1_u1_s1_l1_m16_w2_p4 t512_r1_u2_s1_l1_m16_w2_p4 t512_r1_u2_s1_l1_m16_w2_p2 t512_r1_u4_s1_l1_m16_w2_p2 t256_r1_u2_s1_l1_m16_w2_p4"}
	step xq3p-kernel-check "$BIN" kernel-check --shapes llama3-8b --types q4_k,q6_k --only gemv --gemv-arms "${arms// /,}" --reps 10
	xq3p_bench() {
		synth "$MODELS/llama2-7b-q4_k_m.gguf" --preset llama2-7b --quant q4_k_m --weights blocks || return 1
		MEMRA_GEMV_LARGE=$1 "$BIN" bench "$MODELS/llama2-7b-q4_k_m.gguf" --device cuda -p 512 -n 128 -r 3 -b 16 --no-progress --perf-rows
	}
	for a in $arms; do step "xq3p-b16-$a" xq3p_bench "$a"; done
	# the fastest arm at batch 16 (or XQ3P_PARITY): parity at 16 sequences (fewer rows never take
	# the large arm), then batch 1 and 16 with it, N = 5, with the roofline
	pa=${XQ3P_PARITY:-$(for a in $arms; do
		grep -E '^\| 2.*tg128' "$OUT/xq3p-b16-$a.log" | awk -F'|' -v a="$a" '{gsub(/ /, "", $9); print $9, a}'
	done | sort -rn | head -1 | cut -d' ' -f2)}
	echo "xq3p: fastest arm $pa" >&2
	step "xq3p-parity-p16-$pa" env MEMRA_GEMV_LARGE="$pa" "$BIN" gpu-parity --preset llama3-8b --quant q4_k_m --layers 2 --dim 512 --steps 64 --prompts 16 --tie-tol 0.02 --tie-sigma "$(sigma 16)"
	step "xq3p-best-b1-b16-$pa" switch_bench 1,16 MEMRA_GEMV_LARGE="$pa"
fi
# Mixture of experts (qwen3moe, mixtral): kernel-check of the MoE kernels at the Qwen3-30B-A3B and
# Mixtral-8x7B shapes (routing with exact ids, the grouped and one-row expert products, the sum),
# their sm_90a/sm_120a compile gate, CPU parity of 2-layer models of width 512 at 1 and 16
# sequences (MOE_PROMPTS; 1: the one-row kernels, 16: the grouped products with many slots an
# expert) in the exact and the default configurations, transformers parity on 2-layer BF16
# checkpoints of real width, and batch 1 and 16 of the whole Qwen3-30B-A3B q4_k_m. MOE_PARTS picks
# parts: check parity hf bench (all four by default; one device call holds about two of them).
if [ "$MODE" = moe ]; then
	parts=${MOE_PARTS:-"check parity hf bench"}
	case " $parts " in *" check "*)
		step moe-kernel-check "$BIN" kernel-check --shapes qwen3-30b-a3b,mixtral-8x7b --types q4_k,q6_k,q8_0,bf16 --only moe --reps 10
		step moe-compile-sm90a-sm120a "$BIN" kernel-check --compile-only --arch sm_90a,sm_120a --shapes qwen3-30b-a3b,mixtral-8x7b --only moe
		;;
	esac
	case " $parts " in *" parity "*)
		for p in qwen3-30b-a3b mixtral-8x7b; do
			for q in q4_k_m q8_0 bf16; do
				for n in ${MOE_PROMPTS:-1 16}; do
					step "moe-parity-exact-$p-$q-p$n" "$BIN" gpu-parity --preset "$p" --quant "$q" --layers 2 --dim 512 --steps 64 --prompts $n --cache f32 --prefill-gemv
					step "moe-parity-default-$p-$q-p$n" "$BIN" gpu-parity --preset "$p" --quant "$q" --layers 2 --dim 512 --steps 64 --prompts $n --tie-tol 0.02 --tie-sigma "$(sigma $n)"
				done
			done
		done
		;;
	esac
	case " $parts " in *" hf "*)
		moe_hf() {
			local dirs=()
			for p in qwen3-30b-a3b mixtral-8x7b; do
				synth "$MODELS/hf-$p-bf16" --preset "$p" --quant bf16 --layers 2 --format hf || return 1
				dirs+=("$MODELS/hf-$p-bf16")
			done
			python3 scripts/hf_parity.py --memra "$BIN" --device cuda --steps 64 "$@" "${dirs[@]}"
		}
		step moe-hf-parity-exact moe_hf --exact
		step moe-hf-parity-default moe_hf --tie-tol 0.02 --tie-sigma 3
		;;
	esac
	case " $parts " in *" bench "*)
		step moe-bench-qwen3-30b-a3b model_bench qwen3-30b-a3b q4_k_m 3 1,16 MEMRA_NOTHING=0
		;;
	esac
	grep -H -E '^\| 2.*tg|^roofline' "$OUT"/moe-bench-*.log 2>/dev/null
fi
[ "$MODE" = half ] && grep -H -E '^\| 2.*tg128|^roofline' "$OUT"/half-*.log
[ "$MODE" = xq3 ] && grep -H -E '^\| 2.*tg128' "$OUT"/xq3-b16-*.log
[ "$MODE" = xq3p ] && grep -H -E '^\| 2.*tg128|^roofline' "$OUT"/xq3p-*.log
[ "$MODE" = large ] && grep -H -E '^\| 2.*tg' "$OUT"/large-*.log
case $MODE in rope | split) grep -H -E '^\| 2.*tg' "$OUT/$MODE"-bench-*.log ;; esac
[ "$MODE" = ncu ] && cat "$OUT"/ncu-*.log
[ "$MODE" = halfdef ] && grep -H -E '^\| 2.*tg|^roofline: NVIDIA' "$OUT"/halfdef-*.log
[ "$MODE" = fromdef ] && grep -H -E '^\| 2.*tg|^roofline: NVIDIA' "$OUT"/fromdef-*.log
[ "$MODE" = from ] && grep -H -E '^\| 2.*tg|^roofline: NVIDIA' "$OUT"/from-*.log
[ "$MODE" = b1 ] && grep -H -E '^\| 2.*tg|^roofline' "$OUT"/b1-*.log
case $MODE in drop | drop-f16) grep -H -E '^\| 2.*tg' "$OUT"/drop-*.log ;; esac
[ "$MODE" = f16-prefill ] && grep -H -E '^\| 2|^roofline' "$OUT"/f16p-*.log
[ "$MODE" = kv8def ] && grep -H -E '^\| 2.*tg' "$OUT"/kv8def-*.log
[ "$MODE" = kv8 ] && grep -H -E '^\| 2.*tg|^roofline: NVIDIA' "$OUT"/kv8-*.log
[ "$MODE" = goals ] && grep -H -E '^\| 2.*tg' "$OUT"/goals-*.log
[ "${serve_on:-0}" = 1 ] && cat "$OUT"/serve-bench/*.md && grep -H -E '^\| 2' "$OUT"/serve-sweep.log 2>/dev/null
[ "$MODE" = blas ] && grep -H -E '^\| 2|^roofline' "$OUT"/blas-*.log
[ "$MODE" = defaults ] && grep -H -E '^\| 2' "$OUT"/defaults-*.log && cat "$OUT/cublas.txt"
exit $failed

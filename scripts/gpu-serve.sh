#!/usr/bin/env bash
# The serving suite of the GPU battery (issues 30 and 31: KV pages, the prefix cache, the server at
# the engine's speed), in calls of under 10 minutes on the GPU machine:
#
#   scripts/gpu-serve.sh pages   # paged attention: the CUDA tests, kernel-check of the attention
#                                # families (32k positions included), CPU parity at 1, 2 and 16
#                                # sequences, and llama2-7b q4_k_m decode at batch 1, 16 and 64
#                                # with this build and the one before KV pages (OLD_BIN) in one call
#   scripts/gpu-serve.sh versus  # only the last part of pages: llama2-7b q4_k_m decode at batch 1, 16
#                                # and 64 with this build and OLD_BIN in one call (about 3 minutes)
#   scripts/gpu-serve.sh serve   # memra serve of llama2-7b q4_k_m with --max-running 64: the load
#                                # test at 64 streams, the chat scenario (8 turns, ~4k history) and
#                                # the shared-prefix scenario at 16 streams, each with and without
#                                # the prefix cache
#   scripts/gpu-serve.sh chat    # the chat scenario alone, with and without the prefix cache
#   scripts/gpu-serve.sh speed   # the engine's tg128@512 at batch 1 and 64 (plain, at the server's
#                                # 4,096-position cache, and --pipelined) against the server at 1 and
#                                # 64 streams, temperature 1 and 0, at --max-batch-tokens 2048 (serve's
#                                # default; STEP_TOKENS="512 2048" for both), with the engine's step
#                                # counters and each level's device time a step (issue 31);
#                                # SPEED_PRESET=qwen3-8b for another synthesized model, SPEED_BATCHES
#                                # the engine's batches, SPEED_MAX_RUNNING the server's --max-running
#   scripts/gpu-serve.sh mixed   # the kernels of one serving step of 48 decodes and 1,600 prompt
#                                # tokens (bench --profile-prefill), beside pp512 and pp2048
#   scripts/gpu-serve.sh exact   # greedy from the prefix cache as cold, with speculation as without,
#                                # alone as in batches of 2-64 (the default int8 class and f16), and
#                                # what the default costs against --batch-invariant=off at 1-64 rows
#   scripts/gpu-serve.sh spec    # exact, then speculative decoding's speed (memra run, bench --spec,
#                                # the verify step's cost as bench -b 1,2,4,5,8)
#   scripts/gpu-serve.sh long    # qwen2.5-7b q4_k_m with a 32k context: a 30,000-token prompt
#   scripts/gpu-serve.sh compiled # issue 35: memra compile --arch sm_90a,sm_120a of stories260K and a
#                                # 4-layer llama2-7b-shaped q4_k_m, then serve, run and bench --compiled
#                                # with NVRTC turned off and unfindable: the same greedy text as the
#                                # NVRTC path, no libnvrtc mapped in the server, /ready 200, and the
#                                # refusals of a card, a driver and a model that do not fit
#
# Build here first: make gpu-build, and the older binary for comparison as .gpu/memra-old; carry
# the .gz files (the script unpacks them). Logs go to $OUT (default /tmp/memra-serve); a short
# table is printed last.
set -u
cd "$(dirname "$0")/.."
MODE=${1:-pages}
BIN=${BIN:-.gpu/memra}
OLD_BIN=${OLD_BIN:-.gpu/memra-old}
OUT=${OUT:-/tmp/memra-serve}
MODELS=${MODELS:-/tmp/memra-models}
source scripts/gpu-lib.sh

# serve_up PORT ARGS…: start memra serve on PORT in the background ($SERVE_PID), wait until it
# listens; fails if it exits first.
serve_up() {
	local port=$1 i
	shift
	"$BIN" serve --device cuda --port "$port" "$@" >"$OUT/serve-$port.log" 2>&1 &
	SERVE_PID=$!
	for i in $(seq 1 240); do
		(exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && return 0
		kill -0 $SERVE_PID 2>/dev/null || return 1
		sleep 0.5
	done
	return 1
}
serve_down() {
	kill -TERM "$SERVE_PID" 2>/dev/null
	wait "$SERVE_PID" 2>/dev/null
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$OUT/gpu.txt" 2>&1
L7=$MODELS/llama2-7b-q4_k_m.gguf

# versus: this build's prefill and decode against OLD_BIN's (the build before KV pages, or any
# older build), in one call
bench_versus() {
	step synth-llama2-7b synth "$L7" --preset llama2-7b --quant q4_k_m --weights blocks
	for b in new old; do
		bin=$BIN
		[ $b = old ] && bin=$OLD_BIN
		step "bench-$b" "$bin" bench "$L7" --device cuda --roofline --no-progress --perf-rows -p 512 -n 128 -r "${RUNS:-3}" -b 1,16,64
	done
	grep -H -E '^\| 2.*(tg|pp)|^roofline' "$OUT"/bench-*.log
}

case $MODE in
versus)
	bench_versus
	;;
pages)
	cuda_tests() { (cd runtime/cuda && ../../.gpu/cuda.test -test.v -test.count=1 -test.run "${CUDA_TESTS:-TestGPU}"); }
	step cuda-tests cuda_tests
	step kernel-check-attn "$BIN" kernel-check --shapes llama3-8b,qwen2.5-7b --only attn --reps 3
	for p in 1 2 16; do
		s=3
		[ $p -ge 16 ] && s=3.5
		step "parity-p$p" "$BIN" gpu-parity --preset llama3-8b --quant q4_k_m --layers 2 --dim 512 --steps 64 --prompts $p --tie-tol 0.02 --tie-sigma $s
	done
	bench_versus
	;;
serve | chat)
	step synth-llama2-7b synth "$L7" --preset llama2-7b --quant q4_k_m --weights blocks
	load64() {
		serve_up 8199 --model "l7=$L7" --max-running 64 || return 1
		"$BIN" bench serve --url http://127.0.0.1:8199 --endpoint completions --concurrency 64 --prompt-tokens 512 --max-tokens 128 \
			--duration "${LOAD_DURATION:-30s}" --out "$OUT/load64"
		local rc=$?
		serve_down
		return $rc
	}
	[ "$MODE" = serve ] && step serve-c64 load64
	scenario() { # scenario NAME SERVE_FLAGS BENCH_FLAGS…
		local name=$1 flags=$2
		shift 2
		# shellcheck disable=SC2086
		serve_up 8199 --model "l7=$L7" --max-running 64 $flags || return 1
		"$BIN" bench serve --url http://127.0.0.1:8199 "$@" --out "$OUT/$name"
		local rc=$?
		serve_down
		return $rc
	}
	# a last turn of about 3,700 tokens with its reply: llama2-7b's context is 4,096
	chat=(--scenario chat --turns 8 --history-tokens "${CHAT_HISTORY:-3600}" --max-tokens 64 --concurrency 4 --requests 32)
	step chat-cache scenario chat-cache "" "${chat[@]}"
	step chat-nocache scenario chat-nocache --no-prefix-cache "${chat[@]}"
	shared=(--scenario shared-prefix --prefixes 4 --prefix-tokens 1024 --prompt-tokens 1152 --max-tokens 64 --concurrency 16 --duration 20s)
	[ "$MODE" = serve ] && step shared-cache scenario shared-cache "" "${shared[@]}"
	[ "$MODE" = serve ] && step shared-nocache scenario shared-nocache --no-prefix-cache "${shared[@]}"
	for d in load64 chat-cache chat-nocache shared-cache shared-nocache; do
		echo "== $d"
		cat "$OUT/$d/serve-bench.md" 2>/dev/null
	done
	;;
speed)
	# the engine and the server in one call: bench tg128@512 at batch 1 and 64, then a server
	# (--max-running 64) for each --max-batch-tokens in STEP_TOKENS (one CUDA launch sequence a
	# step), loaded at 1 stream (temperature 1 and 0) and 64 streams (temperature 1, then 0) with
	# 512-token prompts as fast as slots free up; each level its own prompts (--seed), so no level
	# finds another's in the prefix cache; the engine's step counters after each server
	# SPEED_PRESET names another synthesized model (qwen3-8b: issue 31's second model)
	SP=${SPEED_PRESET:-llama2-7b}
	SM=$MODELS/$SP-q4_k_m.gguf
	step "synth-$SP" synth "$SM" --preset "$SP" --quant q4_k_m --weights blocks
	# SPEED_BATCHES: the engine's batches (the levels' rates come from them)
	step bench-engine "$BIN" bench "$SM" --device cuda --no-progress --perf-rows -p 512 -n 128 -r 3 -b "${SPEED_BATCHES:-1,64}"
	# the same with the server's 4,096 positions a sequence (decode attention's live splits spread
	# the live length over the splits the context gives)
	step bench-engine-ctx4096 "$BIN" bench "$SM" --device cuda --no-progress --perf-rows -p 512 -n 128 -r 3 -b "${SPEED_BATCHES:-1,64}" --context 4096
	# and decoding as the server's engine does (each step launched before the one before it is read)
	step bench-engine-pipelined "$BIN" bench "$SM" --device cuda --no-progress --perf-rows -p 512 -n 128 -r 3 -b "${SPEED_BATCHES:-1,64}" --context 4096 --pipelined
	rate64=$(sed -n -E 's/^\| 2.*tg128@512 \| 64 \| [0-9]+ \| ([0-9.]+) .*/\1/p' "$OUT/bench-engine.log" | head -1)
	rate1=$(sed -n -E 's/^\| 2.*tg128@512 \| 1 \| [0-9]+ \| ([0-9.]+) .*/\1/p' "$OUT/bench-engine.log" | head -1)
	decode_counts() { # the engine's decode step seconds and steps, and the device's timed steps and seconds, so far
		curl -s http://127.0.0.1:8199/metrics | awk '/^memra_engine_step_seconds_total\{kind="decode"/ {s = $2}
			/^memra_engine_steps_total\{kind="decode"/ {n = $2}
			/^memra_engine_device_steps_total/ {dn = $2}
			/^memra_engine_device_seconds_total/ {ds += $2}
			END {print s + 0, n + 0, dn + 0, ds + 0}'
	}
	speed_serve() { # speed_serve STEP_TOKENS
		serve_up 8199 --model "m=$SM" --max-running "${SPEED_MAX_RUNNING:-64}" --max-batch-tokens "$1" || return 1
		local c t rc=0 seed=10 s0 n0 d0 ds0 s1 n1 d1 ds1
		for lv in ${LEVELS:-1:1 1:0 64:1 64:0}; do # concurrency:temperature
			c=${lv%:*} t=${lv#*:} seed=$((seed + 1))
			rate=$rate64
			[ "$c" = 1 ] && rate=$rate1
			d=${SPEED_DURATION:-20s}
			[ "$c" = 64 ] && d=${SPEED64_DURATION:-45s}
			read -r s0 n0 d0 ds0 < <(decode_counts)
			"$BIN" bench serve --url http://127.0.0.1:8199 --endpoint completions --concurrency $c --prompt-tokens 512 \
				--max-tokens 128 --temperature $t --duration "$d" --seed $seed ${rate:+--engine-rate $rate} \
				--out "$OUT/speed-m$1-c$c-t$t" || rc=1
			# the level's decode step period as the engine counts it (a collection to the next),
			# against bench's seconds a step (1 / its b1 rate), and the device's own time of its
			# pipelined steps (memra_engine_device_seconds_total): the difference is the device waiting
			read -r s1 n1 d1 ds1 < <(decode_counts)
			awk -v s="$s1" -v s0="$s0" -v n="$n1" -v n0="$n0" -v d="$d1" -v d0="$d0" -v ds="$ds1" -v ds0="$ds0" -v lv="m$1 c$c t$t" \
				'BEGIN {if (n > n0) printf "%s: %d decode steps, %.3f ms a step", lv, n - n0, 1000 * (s - s0) / (n - n0)
					if (d > d0) printf "; %d timed on the device, %.3f ms a step there", d - d0, 1000 * (ds - ds0) / (d - d0)
					print ""}' |
				tee -a "$OUT/periods.txt"
		done
		curl -s http://127.0.0.1:8199/metrics | grep -E '^memra_(engine|kv_pages|preempt|prefix|prompt)' >"$OUT/metrics-m$1.txt"
		serve_down
		return $rc
	}
	for m in ${STEP_TOKENS:-2048}; do
		step "serve-speed-m$m" speed_serve "$m"
	done
	grep -H -E '^\| 2.*tg' "$OUT/bench-engine.log" "$OUT/bench-engine-ctx4096.log" "$OUT/bench-engine-pipelined.log"
	for d in "$OUT"/speed-*; do echo "== $d"; grep -E '^\| [0-9]' "$d/serve-bench.md"; done
	for f in "$OUT"/metrics-*.txt; do echo "== $f"; cat "$f"; done
	cat "$OUT/periods.txt"
	;;
mixed)
	# where a serving step that admits requests goes: the kernels of one step of 48 decodes at
	# position 512 and 1,600 prompt tokens of new sequences (the prefill program), against pp of
	# 512 and 2048 tokens alone (one pass each)
	step synth-llama2-7b synth "$L7" --preset llama2-7b --quant q4_k_m --weights blocks
	step profile-mixed "$BIN" bench "$L7" --device cuda --no-progress -p 512 -n 8 -r 3 -b 48 --profile --profile-prefill "${MIXED_PROMPT:-1600}"
	step pp "$BIN" bench "$L7" --device cuda --no-progress --perf-rows -p 2048 -n 0 -r 3
	step pp512 "$BIN" bench "$L7" --device cuda --no-progress --perf-rows -p 512 -n 0 -r 3
	sed -n '/^profile:/,$p' "$OUT/profile-mixed.log" | head -60
	grep -h -E '^\| 2.*pp' "$OUT/pp.log" "$OUT/pp512.log"
	;;
exact | spec)
	# greedy output from the prefix cache as cold, and with n-gram speculation as without, on the
	# GPU (runtime/cuda engine tests), then speculative decoding's speed on a copy-heavy prompt
	cuda_tests() { (cd runtime/cuda && ../../.gpu/cuda.test -test.v -test.count=1 -test.run 'TestGPUPrefixCacheExact|TestGPUSpecExact|TestGPUBatchWidthsExact'); }
	step engine-exact cuda_tests
	# what batch invariance costs: the default int8 class against off, each width's fastest products
	step synth-llama2-7b synth "$L7" --preset llama2-7b --quant q4_k_m --weights blocks
	for inv in int8 off; do
		step "bench-$inv" "$BIN" bench "$L7" --device cuda --no-progress --perf-rows -p 512 -n 128 -r 3 -b 1,2,5,8,16,64 --batch-invariant=$inv
	done
	grep -H -E '^\| 2.*tg' "$OUT"/bench-int8.log "$OUT"/bench-off.log
	[ "$MODE" = spec ] && {
		P="Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day, she saw a big red ball under a tree. Please say the story again. Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day, she saw a big red ball under a tree. Once upon a time,"
		step synth-llama2-7b synth "$L7" --preset llama2-7b --quant q4_k_m --weights blocks
		for m in stories260K "$L7"; do
			n=$(basename "$m" .gguf)
			for sp in off ngram; do
				"$BIN" run "$m" --device cuda --temperature 0 -n 256 --ignore-eos --prompt "$P" --spec $sp >"$OUT/$n-$sp.txt" 2>"$OUT/$n-$sp.err"
			done
			cmp -s "$OUT/$n-off.txt" "$OUT/$n-ngram.txt" && echo "$n: the same text off and on" || echo "$n: TEXT DIFFERS"
			tail -n 2 "$OUT/$n-off.err" "$OUT/$n-ngram.err"
		done
		step bench-spec "$BIN" bench stories260K --device cuda --spec ngram -n 300 -r 5 --no-progress
		step bench-verify "$BIN" bench "$L7" --device cuda --no-progress --perf-rows -p 512 -n 128 -r 3 -b 1,2,4,5,8
		cat "$OUT/bench-spec.log"; grep -h -E '^\| 2' "$OUT/bench-verify.log"
	}
	;;
long)
	Q7=$MODELS/qwen2.5-7b-q4_k_m.gguf
	step synth-qwen2.5-7b synth "$Q7" --preset qwen2.5-7b --quant q4_k_m --weights blocks
	long30k() {
		serve_up 8199 --model "q7=$Q7" --context 32768 --max-running 4 || return 1
		"$BIN" bench serve --url http://127.0.0.1:8199 --endpoint completions --concurrency 1 --requests 2 \
			--prompt-tokens 30000 --max-tokens 32 --out "$OUT/long30k"
		local rc=$?
		serve_down
		return $rc
	}
	step serve-30k long30k
	cat "$OUT/long30k/serve-bench.md" 2>/dev/null
	;;
compiled)
	# the same greedy completion from the NVRTC path and from the artifact, NVRTC off and unfindable
	S4=$MODELS/llama2-7b-4l-q4_k_m.gguf
	step synth-llama2-7b-4l synth "$S4" --preset llama2-7b --quant q4_k_m --layers 4 --weights blocks
	nonvrtc() { # run a command with NVRTC turned off and out of every search path
		env MEMRA_NO_NVRTC=1 MEMRA_NVRTC_DIR=/nonexistent LD_LIBRARY_PATH= "$@"
	}
	greedy() { # greedy PORT: the text of a greedy completion
		curl -s http://127.0.0.1:"$1"/v1/completions -H 'Content-Type: application/json' \
			-d '{"prompt": "Once upon a time", "max_tokens": 64, "temperature": 0}' |
			sed -E 's/.*"text":"(([^"\\]|\\.)*)".*/\1/'
	}
	for m in stories260K "$S4"; do
		name=$(basename "$m" .gguf)
		art=$OUT/art-$name
		rm -rf "$art"
		step "compile-$name" "$BIN" compile "$m" -o "$art" --arch sm_90a,sm_120a --max-seqs 8
		# memra run decodes one sequence: its NVRTC path lowers for --max-seqs 1
		rm -rf "$art-1"
		step "compile-$name-1" "$BIN" compile "$m" -o "$art-1" --arch sm_90a,sm_120a --max-seqs 1
		check_art() { # every kernel has an ELF cubin per target and PTX with its entry
			local k n=0
			for k in $(sed -n 's/^ *"kernel": "\(.*\)",$/\1/p' "$art/manifest.json"); do
				head -c 4 "$art/kernels/sm_90a/$k.cubin" | grep -q ELF || return 1
				head -c 4 "$art/kernels/sm_120a/$k.cubin" | grep -q ELF || return 1
				grep -q "\.entry $k(" "$art/kernels/compute_90/$k.ptx" || return 1
				n=$((n + 1))
			done
			echo "$n kernels"
			[ $n -gt 0 ]
		}
		step "artifact-$name" check_art
		jit_vs_compiled() {
			serve_up 8197 --model "m=$m" --max-running 8 || return 1
			greedy 8197 >"$OUT/greedy-$name-nvrtc.txt"
			serve_down
			# not through nonvrtc: $! must be the server, not a subshell, for serve_down to stop it
			env MEMRA_NO_NVRTC=1 MEMRA_NVRTC_DIR=/nonexistent LD_LIBRARY_PATH= "$BIN" serve --device cuda --port 8198 --compiled "$art" >"$OUT/serve-compiled-$name.log" 2>&1 &
			SERVE_PID=$!
			local i
			for i in $(seq 1 240); do
				(exec 3<>/dev/tcp/127.0.0.1/8198) 2>/dev/null && break
				kill -0 $SERVE_PID 2>/dev/null || return 1
				sleep 0.5
			done
			curl -sf http://127.0.0.1:8198/ready || { serve_down; return 1; }
			greedy 8198 >"$OUT/greedy-$name-compiled.txt"
			if grep -q nvrtc /proc/$SERVE_PID/maps; then
				echo "libnvrtc is mapped in the server"
				serve_down
				return 1
			fi
			serve_down
			echo "nvrtc:    $(cat "$OUT/greedy-$name-nvrtc.txt")"
			echo "compiled: $(cat "$OUT/greedy-$name-compiled.txt")"
			[ -s "$OUT/greedy-$name-nvrtc.txt" ] && cmp "$OUT/greedy-$name-nvrtc.txt" "$OUT/greedy-$name-compiled.txt"
		}
		step "serve-$name" jit_vs_compiled
		run_both() {
			"$BIN" run "$m" --device cuda -p "Once upon a time" -n 48 --temperature 0 >"$OUT/run-$name-nvrtc.txt" 2>/dev/null &&
				nonvrtc "$BIN" run --compiled "$art-1" -p "Once upon a time" -n 48 --temperature 0 >"$OUT/run-$name-compiled.txt" &&
				cmp "$OUT/run-$name-nvrtc.txt" "$OUT/run-$name-compiled.txt"
		}
		step "run-$name" run_both
		step "bench-$name" nonvrtc "$BIN" bench --compiled "$art" --no-progress -p 64 -n 16 -r 1 -b 1,8
	done
	# refusals: a card without a cubin or a PTX it can take, a driver older than the images, another model
	art=$OUT/art-stories260K
	rm -rf "$OUT/art-120" "$OUT/art-newdriver"
	step compile-sm120a-only "$BIN" compile stories260K -o "$OUT/art-120" --arch sm_120a,compute_120
	refused() { # refused PATTERN CMD…: CMD fails and says PATTERN
		local pattern=$1
		shift
		! "$@" >"$OUT/refused.log" 2>&1 && grep -q -- "$pattern" "$OUT/refused.log" && cat "$OUT/refused.log"
	}
	cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
	if [ "$cap" -lt 120 ]; then
		step refuse-card refused "compile it with --arch" nonvrtc "$BIN" run --compiled "$OUT/art-120" -n 4
	fi
	cp -r "$art" "$OUT/art-newdriver"
	sed -i 's/"nvrtc": "[0-9.]*"/"nvrtc": "99.0"/' "$OUT/art-newdriver/manifest.json"
	step refuse-driver refused "need CUDA 99" nonvrtc "$BIN" run --compiled "$OUT/art-newdriver" -n 4
	step refuse-model refused "not the one the artifact" nonvrtc "$BIN" run "$S4" --compiled "$art" -n 4
	tail -n 2 "$OUT"/serve-*.log "$OUT"/run-*.txt 2>/dev/null | head -40
	;;
*)
	echo "usage: $0 pages|versus|serve|chat|speed|one|mixed|exact|spec|long|compiled" >&2
	exit 2
	;;
esac
printf '%s\n' "${rows[@]}"
exit $failed

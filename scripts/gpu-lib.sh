# shellcheck shell=bash
# The common part of the GPU suites (gpu-battery.sh, gpu-serve.sh), sourced from the
# repository root after a suite sets BIN, OUT and MODELS (and STEP_WIDTH, its table's first
# column): makes OUT and MODELS, unpacks the carried .gz files of ${GZ_DIR:-.gpu} into .gpu (a
# binary older than its .gz is replaced), points MEMRA_NVRTC_DIR at the CUDA toolkit's NVRTC, and
# defines step and synth; rows holds step's table, failed is 1 once a step failed.
mkdir -p "$OUT" "$MODELS" .gpu
for f in "${GZ_DIR:-.gpu}"/*.gz; do
	[ -e "$f" ] || continue
	d=.gpu/$(basename "$f" .gz)
	if [ ! -e "$d" ] || [ "$f" -nt "$d" ]; then gunzip -c "$f" >"$d" && chmod +x "$d"; fi
done
export MEMRA_NVRTC_DIR=${MEMRA_NVRTC_DIR:-/usr/local/cuda/targets/x86_64-linux/lib}
rows=()
failed=0

# step NAME CMD…: run CMD with its output in $OUT/NAME.log, record pass/FAIL and seconds in rows;
# returns CMD's status.
step() {
	local name=$1 t0 rc
	shift
	t0=$(date +%s)
	"$@" >"$OUT/$name.log" 2>&1
	rc=$?
	local r=pass
	[ $rc -ne 0 ] && r=FAIL && failed=1
	rows+=("$(printf "%-${STEP_WIDTH:-40}s %-5s %5ss" "$name" "$r" "$(($(date +%s) - t0))")")
	echo "== $name: $r" >&2
	return $rc
}

synth() { # synth FILE ARGS…: write a synthesized model once
	local f=$1
	shift
	[ -e "$f" ] || "$BIN" synth --quiet "$@" -o "$f"
}

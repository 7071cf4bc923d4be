#!/usr/bin/env bash
# Runs the openai-npm test suite against a real `memra serve`: builds memra
# and the WebAssembly plugins (`make plugins` plus the test-only
# testdata/testplugin), synthesizes a small qwen3 model and its embedding
# variant, starts an open server (the embedded model, plus the qwen3 one as
# "qwen3" and the embedding one as "embed", with a model metadata file), a keyed one and
# one with plugins on free loopback ports, waits for /ready, runs
# `node --test`, and always stops the servers.
set -euo pipefail

# The suite needs node, npm and curl beside Go; say at once which are
# missing (bash builtins only, before anything else runs). --check stops
# after this.
missing=()
for tool in node npm curl; do
	command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "make test: the OpenAI SDK suite (serve/npmtest) needs node, npm and curl; not found: ${missing[*]}" >&2
	exit 1
fi
if [ "${1:-}" = --check ]; then
	exit 0
fi

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT

(cd "$root" && go build -o "$tmp/memra" ./cmd/memra)
# The example plugins (the same lines as `make plugins`) and the test plugin.
wasm() { (cd "$root" && GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 go build -trimpath -buildmode=c-shared -o "$1" "$2"); }
wasm "$root/bin/plugins/chatml.wasm" ./serve/plugin/examples/chatml
wasm "$root/bin/plugins/regex.wasm" ./serve/plugin/examples/regex
wasm "$tmp/testplugin.wasm" ./serve/npmtest/testdata/testplugin
if [ ! -d "$here/node_modules/openai" ]; then
	(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
fi

free_port() {
	node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}

# start NAME PORT [ARGS...]: run memra serve from an empty folder (no
# memra.yaml) with no inherited MEMRA_* settings.
start() {
	local name=$1 port=$2
	shift 2
	(cd "$tmp" && exec env $(env | grep -o '^MEMRA_[A-Z_]*' | sed 's/^/-u /') \
		"$tmp/memra" serve --host 127.0.0.1 --port "$port" --max-running 4 "$@" >"$tmp/$name.log" 2>&1) &
	pids+=($!)
}

wait_ready() {
	local name=$1 port=$2
	for _ in $(seq 1 300); do
		if curl -sf "http://127.0.0.1:$port/ready" >/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	echo "memra serve ($name) did not become ready; its log:" >&2
	cat "$tmp/$name.log" >&2
	return 1
}

# A one-layer qwen3 model with random weights, the real Qwen vocabulary and
# the Qwen3 chat template (tools and thinking), served beside the embedded
# model as "qwen3" for the tool, structured-output and reasoning tests.
"$tmp/memra" synth --preset qwen3-8b --layers 1 --dim 64 --ffn 128 --quant f32 --quiet -o "$tmp/qwen3.gguf" >/dev/null
# Its embedding variant (no head, last-token pooling, inputs ending in EOS),
# served as "embed" for the embeddings tests, and the metadata file whose
# prices /v1/models shows.
"$tmp/memra" synth --preset qwen3-8b --layers 1 --dim 64 --ffn 128 --quant f32 --embedding last --quiet -o "$tmp/embed.gguf" >/dev/null
cat >"$tmp/metadata.json" <<'JSON'
{
  "provider": {"name": "memra npm test", "status_url": "https://status.example.com", "regions": ["local"]},
  "models": {
    "qwen3": {
      "display_name": "Qwen3 (synthetic)",
      "pricing": {"input": "0.0000001", "output": "0.0000004", "cache_read": "0.00000001", "cache_write": "0.000000125"},
      "input_modalities": ["text"], "output_modalities": ["text"]
    },
    "embed": {"display_name": "Qwen3 embedding (synthetic)", "input_modalities": ["text"], "output_modalities": ["embedding"]}
  }
}
JSON

# The suite runs twice: against servers as they start by default, then with
# speculative decoding on (--spec ngram), which must change nothing a client
# can tell.
status=0
for pass in plain spec; do
	extra=()
	[ "$pass" = spec ] && extra=(--spec ngram)
	open_port=$(free_port)
	keyed_port=$(free_port)
	plugin_port=$(free_port)
	key="sk-npmtest-$RANDOM$RANDOM"
	first=${#pids[@]}
	start open "$open_port" stories260K --model "qwen3=$tmp/qwen3.gguf" --model "embed=$tmp/embed.gguf" \
		--model-metadata "$tmp/metadata.json" "${extra[@]}"
	start keyed "$keyed_port" --api-keys "$key" "${extra[@]}"
	start plugins "$plugin_port" --template-plugin "stories260K=$tmp/testplugin.wasm" \
		--grammar-plugin "test=$tmp/testplugin.wasm" --grammar-plugin "regex=$root/bin/plugins/regex.wasm" "${extra[@]}"
	wait_ready open "$open_port"
	wait_ready keyed "$keyed_port"
	wait_ready plugins "$plugin_port"
	echo "npm suite: servers started ${extra[*]:-with their defaults}" >&2
	pass_status=0
	MEMRA_URL="http://127.0.0.1:$open_port/v1" \
		MEMRA_KEYED_URL="http://127.0.0.1:$keyed_port/v1" \
		MEMRA_PLUGIN_URL="http://127.0.0.1:$plugin_port/v1" \
		MEMRA_KEY="$key" \
		MEMRA_AGENT_MODEL=qwen3 \
		MEMRA_EMBED_MODEL=embed \
		node --test --test-concurrency=1 "$here"/*.test.mjs || pass_status=$?
	if [ "$pass_status" -ne 0 ]; then
		status=$pass_status
		for name in open plugins; do
			echo "--- server log ($name, $pass) ---" >&2
			tail -n 50 "$tmp/$name.log" >&2
		done
	fi
	for p in "${pids[@]:$first}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	pids=("${pids[@]:0:$first}")
done
exit "$status"

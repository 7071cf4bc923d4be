package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/hub"
	"github.com/memra-ai/memra/runtime/load/builtin"
	"github.com/memra-ai/memra/serve"
	"github.com/memra-ai/memra/serve/chat"
	"github.com/memra-ai/memra/serve/plugin"
)

func init() { rootCmd.AddCommand(newServeCmd()) }

// serveOptions are the flags of memra serve.
type serveOptions struct {
	host           string
	port           int
	models         []string
	modelsEnv      []string
	apiKeysFile    string
	apiKeys        []string
	maxRunning     int
	maxQueue       int
	maxBatchTokens int
	prefillChunk   int
	device         string
	kvCache        string
	kv             gpuOptions
	noPrefixCache  bool
	spec           specOptions
	threads        int
	drainTimeout   time.Duration
	maxBody        int64
	retryAfter     time.Duration
	readTimeout    time.Duration
	idleTimeout    time.Duration
	maxConns       int
	templatePlugin []string
	grammarPlugin  []string
	pp             ppOptions
	pooling        []string
	modelMetadata  string
	usageCost      bool
	compiled       string
	metricsPort    int
}

func newServeCmd() *cobra.Command {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve [MODEL...]",
		Short: "Serve models over an OpenAI-compatible HTTP API",
		Long: `Serve one or more models over an OpenAI-compatible HTTP API: /v1/chat/completions,
/v1/completions and /v1/models (blocking or streamed as server-sent events), plus
/health, /ready and /metrics; /v1/embeddings for models with a pooling (--pooling, or
one the model declares), the stateless /v1/responses, and Ollama's /api/chat, /api/generate,
/api/tags, /api/show, /api/embed and /api/version. --model-metadata adds prices, modalities
and limits to /v1/models.

Each MODEL is served under its file name without extension (an hf: spec under its
repository's name); --model alias=path (repeatable) or MEMRA_MODELS="a=path,b=path"
picks the alias. Without any model the embedded default (` + builtin.Name + `) is served.
` + modelHelp + `

The server refuses to listen on a non-loopback --host without API keys
(--api-keys-file or MEMRA_API_KEYS). --template-plugin and --grammar-plugin load
WebAssembly chat-template and grammar plugins (docs/PLUGINS.md). SIGTERM or SIGINT drains: new requests get
503, running ones finish (up to --drain-timeout), then the server exits 0.
See docs/SERVING.md and docs/FLAGS.md.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFlagLimits(cmd, serveLimits); err != nil {
				return err
			}
			return runServe(cmd, args, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.host, "host", "127.0.0.1", "address to listen on; a non-loopback address needs API keys")
	f.IntVar(&o.port, "port", 8080, "TCP port to listen on")
	f.StringSliceVar(&o.models, "model", nil, "model to serve as alias=path (repeatable); path alone uses its file name")
	f.StringSliceVar(&o.modelsEnv, "models", nil, "comma-separated alias=path list (the form of MEMRA_MODELS)")
	f.StringVar(&o.apiKeysFile, "api-keys-file", "", "file of bearer API keys, one per line (# comments and blank lines skipped)")
	f.StringSliceVar(&o.apiKeys, "api-keys", nil, "comma-separated bearer API keys (prefer MEMRA_API_KEYS or --api-keys-file)")
	f.IntVar(&o.maxRunning, "max-running", runtime.DefaultMaxRunning, "sequences decoding at once per model")
	f.IntVar(&o.maxQueue, "max-queue", runtime.DefaultMaxQueue, "requests waiting per model beyond --max-running; more get 429 (0: no queue)")
	f.IntVar(&o.maxBatchTokens, "max-batch-tokens", runtime.DefaultMaxBatchTokens, "tokens of one engine step, all sequences together (CUDA: one launch sequence, its activations sized for it)")
	f.IntVar(&o.prefillChunk, "prefill-chunk", runtime.DefaultPrefillChunk, "prompt tokens one sequence feeds per step")
	f.StringVar(&o.device, "device", "", deviceHelp)
	f.StringVar(&o.kvCache, "kv-cache", "", kvCacheHelp)
	addKVFlags(f, &o.kv)
	f.BoolVar(&o.noPrefixCache, "no-prefix-cache", false, "compute every prompt whole: no KV page is reused between requests")
	addSpecFlags(f, &o.spec)
	f.IntVarP(&o.threads, "threads", "t", 0, "CPU threads (0: all cores)")
	f.DurationVar(&o.drainTimeout, "drain-timeout", 30*time.Second, "how long a drain waits for running requests before cancelling them")
	f.Int64Var(&o.maxBody, "max-body", serve.DefaultMaxBody, "request body limit in bytes; larger bodies get 413")
	f.DurationVar(&o.retryAfter, "retry-after", serve.DefaultRetryAfter, "Retry-After sent with 429 and 503 responses")
	f.DurationVar(&o.readTimeout, "read-timeout", serve.DefaultReadTimeout,
		"time a client has to send a request's headers, and again its body (a slower body gets 408)")
	f.DurationVar(&o.idleTimeout, "idle-timeout", serve.DefaultIdleTimeout, "kept-alive connections idle this long are closed")
	f.IntVar(&o.maxConns, "max-conns", serve.DefaultMaxConns,
		"connections served at once; past it /health, /ready and /metrics still answer, other requests get 503")
	f.StringSliceVar(&o.templatePlugin, "template-plugin", nil,
		"MODEL=FILE.wasm: the chat template of served model MODEL is this WebAssembly plugin (repeatable)")
	f.StringSliceVar(&o.grammarPlugin, "grammar-plugin", nil,
		`NAME=FILE.wasm: a grammar plugin requests use as "grammar": {"plugin": NAME, "source": …} (repeatable)`)
	f.StringSliceVar(&o.pooling, "pooling", nil,
		"[MODEL=]mean|cls|last|none: serve embeddings from the model's final hidden states pooled this way (every model, or MODEL; repeatable); default: the pooling the model declares")
	f.StringVar(&o.modelMetadata, "model-metadata", "", "JSON file of per-model prices, modalities, display names and limits and a provider block, shown by /v1/models")
	f.BoolVar(&o.usageCost, "usage-cost", false, "add the request's cost, from the --model-metadata prices, to usage")
	addCompiledFlag(f, &o.compiled)
	f.IntVar(&o.metricsPort, "metrics-port", 0,
		"also serve /metrics on this port of --host without the API keys (for an inference gateway's endpoint picker and Prometheus); 0: off")
	addPPFlags(cmd, &o.pp)
	return cmd
}

// modelSpec is one model to serve: its alias and what to open.
type modelSpec struct{ alias, path string }

// modelSpecs collects positional models, --model and --models.
func modelSpecs(args, flags []string) ([]modelSpec, error) {
	var specs []modelSpec
	for _, a := range args {
		specs = append(specs, modelSpec{alias: aliasOf(a), path: a})
	}
	for _, m := range flags {
		m = strings.TrimSpace(m)
		if m == "" {
			continue
		}
		alias, path, ok := strings.Cut(m, "=")
		if !ok {
			alias, path = aliasOf(m), m
		}
		if alias == "" || path == "" {
			return nil, fmt.Errorf("--model %q: want alias=path", m)
		}
		specs = append(specs, modelSpec{alias: alias, path: path})
	}
	if len(specs) == 0 {
		specs = append(specs, modelSpec{alias: builtin.Name})
	}
	return specs, nil
}

// aliasOf names a model by its file or folder name without extension,
// an hf: spec by its repository's name.
func aliasOf(path string) string {
	if path == builtin.Name {
		return path
	}
	if sp, err := hub.ParseSpec(path); err == nil {
		return sp.Repo[strings.LastIndex(sp.Repo, "/")+1:]
	}
	base := filepath.Base(strings.TrimRight(path, "/"))
	return strings.TrimSuffix(base, filepath.Ext(base))
}

// readKeys gathers API keys from the file and the list.
func readKeys(file string, list []string) ([]string, error) {
	keys := append([]string(nil), list...)
	if file == "" {
		return keys, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("--api-keys-file: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line != "" && !strings.HasPrefix(line, "#") {
			keys = append(keys, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--api-keys-file %s: %w", file, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("--api-keys-file %s holds no keys", file)
	}
	return keys, nil
}

func runServe(cmd *cobra.Command, args []string, o *serveOptions) error {
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	keys, err := readKeys(o.apiKeysFile, o.apiKeys)
	if err != nil {
		return err
	}
	n := 0
	for _, k := range keys {
		if strings.TrimSpace(k) != "" {
			n++
		}
	}
	if err := serve.CheckBind(o.host, n); err != nil {
		return err
	}
	specs, err := modelSpecs(args, append(o.models, o.modelsEnv...))
	if err != nil {
		return err
	}
	var aliases []string
	for _, sp := range specs {
		aliases = append(aliases, sp.alias)
	}
	poolings, err := parsePoolings(o.pooling, aliases)
	if err != nil {
		return err
	}
	var md *serve.Metadata
	if o.modelMetadata != "" {
		if md, err = serve.LoadMetadata(o.modelMetadata); err != nil {
			return err
		}
	}
	if o.usageCost && md == nil {
		return fmt.Errorf("--usage-cost needs --model-metadata: the cost comes from its prices")
	}
	if o.compiled != "" {
		if specs, err = compiledSpec(cmd, specs, o); err != nil {
			return err
		}
	}
	var models []serve.Model
	for _, sp := range specs {
		m, closeFn, err := openServed(cmd, sp, o, poolings)
		if err != nil {
			return err
		}
		defer closeFn()
		models = append(models, m)
		log.Info("model loaded", "alias", sp.alias, "path", sp.path, "context", m.Engine.Info().ContextLength)
	}
	plugins, err := plugin.Open(cmd.Context(), plugin.SetConfig{Templates: o.templatePlugin, Grammars: o.grammarPlugin})
	if err != nil {
		return err
	}
	defer plugins.Close()
	if n := len(o.templatePlugin) + len(o.grammarPlugin); n > 0 {
		log.Info("plugins loaded", "template", o.templatePlugin, "grammar", o.grammarPlugin)
	}
	srv, err := serve.New(serve.Config{Models: models, Host: o.host, APIKeys: keys, MaxBody: o.maxBody,
		RetryAfter: o.retryAfter, ReadTimeout: o.readTimeout, IdleTimeout: o.idleTimeout, MaxConns: o.maxConns,
		Logger: log, Plugins: plugins, Metadata: md, UsageCost: o.usageCost, Version: buildVersion()})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(o.host, strconv.Itoa(o.port)))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if o.metricsPort > 0 {
		stop, err := serveMetrics(o.host, o.metricsPort, srv, log)
		if err != nil {
			ln.Close()
			return err
		}
		defer stop()
	}
	log.Info("serving", "url", "http://"+ln.Addr().String(), "auth", n > 0)
	base := cmd.Context()
	if base == nil {
		base = context.Background()
	}
	ctx, stop := signal.NotifyContext(base, syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := srv.Run(ctx, ln, o.drainTimeout); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// openServed loads one model with its backend, engine and chat template;
// poolings are the --pooling choices by alias ("" for every model).
func openServed(cmd *cobra.Command, sp modelSpec, o *serveOptions, poolings map[string]runtime.Pooling) (serve.Model, func(), error) {
	m, err := openModel(cmd, sp.path) // "": the embedded model
	if err != nil {
		return serve.Model{}, nil, fmt.Errorf("model %s: %w", sp.alias, err)
	}
	if m.Tokenizer == nil {
		m.Close()
		return serve.Model{}, nil, fmt.Errorf("model %s (%s) has no tokenizer", sp.alias, m.Path)
	}
	pool, err := servedPooling(m, sp.alias, poolings)
	if err != nil {
		m.Close()
		return serve.Model{}, nil, fmt.Errorf("model %s: %w", sp.alias, err)
	}
	facts := modelFacts(m)
	gpu := o.kv
	gpu.kvCache, gpu.embedding = o.kvCache, pool != runtime.PoolNone
	gpu.stepTokens = o.maxBatchTokens
	b, err := newBackend(m, o.device, o.threads, o.maxRunning, gpu, o.pp)
	if err == nil {
		err = releaseHostWeights(m, b)
	}
	if err != nil {
		m.Close()
		return serve.Model{}, nil, fmt.Errorf("model %s: %w", sp.alias, err)
	}
	tmpl := chat.Fallback()
	if m.ChatTemplate != "" {
		if tmpl, err = chat.Compile(m.ChatTemplate); err != nil {
			m.Close()
			return serve.Model{}, nil, fmt.Errorf("chat template of %s: %w", sp.alias, err)
		}
	}
	spec, release, err := o.spec.config(cmd, m, o.device, o.threads, o.maxRunning, o.kv)
	if err != nil {
		b.Close()
		m.Close()
		return serve.Model{}, nil, fmt.Errorf("model %s: %w", sp.alias, err)
	}
	eng := runtime.NewEngine(b, m.Tokenizer, runtime.EngineConfig{MaxRunning: o.maxRunning, MaxQueue: engineQueue(o.maxQueue),
		MaxBatchTokens: o.maxBatchTokens, PrefillChunk: o.prefillChunk, NoPrefixCache: o.noPrefixCache, Spec: spec})
	closeFn := func() {
		eng.Close()
		release()
		m.Close()
	}
	return serve.Model{ID: sp.alias, Engine: serve.FromRuntime(eng), Template: tmpl, Pooling: pool, Facts: facts}, closeFn, nil
}

// compiledSpec sets serve up for --compiled: one model (the one named, or
// the artifact's own), checked against the artifact, and --max-running
// the artifact's sequences unless given (and then equal to them).
func compiledSpec(cmd *cobra.Command, specs []modelSpec, o *serveOptions) ([]modelSpec, error) {
	if len(specs) != 1 {
		return nil, fmt.Errorf("--compiled %s: serves one model, not %d", o.compiled, len(specs))
	}
	sp := specs[0]
	a, path, err := openCompiled(cmd, o.compiled, sp.path)
	if err != nil {
		return nil, err
	}
	if sp.path == "" { // no model named: the artifact's, under its name
		name := a.Manifest.ModelSpec
		if name == "" {
			name = a.Manifest.Model
		}
		sp.alias = aliasOf(name)
	}
	sp.path = path
	if fl := cmd.Flags().Lookup("max-running"); fl == nil || !fl.Changed {
		o.maxRunning = a.Manifest.MaxSeqs
	}
	o.kv.kvCache = o.kvCache
	if err := o.kv.useArtifact(cmd, a, "max-running", o.maxRunning); err != nil {
		return nil, err
	}
	return []modelSpec{sp}, nil
}

// serveMetrics serves srv's /metrics, and nothing else, on host:port
// without the API keys until stop is called.
func serveMetrics(host string, port int, srv *serve.Server, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("--metrics-port: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", srv.MetricsHandler())
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	log.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return func() { _ = hs.Close() }, nil
}

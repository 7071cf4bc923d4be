// Package serve is memra's OpenAI-compatible HTTP server: chat and text
// completions (blocking and SSE streaming), model listing, bearer-key auth,
// Prometheus metrics, admission (429 with Retry-After when the engine's
// running and queued slots are full) and graceful drain. Chat templates and
// grammars can also come from WebAssembly plugins (Config.Plugins).
//
// The server drives engines through the small Engine interface, so its tests
// run against a deterministic fake and production against runtime.Engine.
package serve

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/serve/plugin"
)

// Defaults of Config.
const (
	DefaultMaxBody    = 4 << 20
	DefaultRetryAfter = time.Second
)

// Config configures a Server.
type Config struct {
	Models []Model // the first is the default when a request names none
	// Host is the address the server will listen on; a non-loopback host
	// without APIKeys is refused.
	Host              string
	APIKeys           []string      // bearer keys; empty = no auth (loopback only)
	MaxBody           int64         // request body limit in bytes; 0 = DefaultMaxBody
	RetryAfter        time.Duration // Retry-After of 429 and 503; 0 = DefaultRetryAfter
	Logger            *slog.Logger  // nil = slog.Default()
	StartTime         time.Time     // "created" of models without one; zero = now
	AllowPublicNoAuth bool          // tests only: skip the bind check
	// ReadTimeout bounds how long a client may take to send a request's
	// headers, and again its body (a slower body gets 408 and the
	// connection is closed); 0 = DefaultReadTimeout.
	ReadTimeout time.Duration
	// IdleTimeout closes a kept-alive connection with no request for this
	// long; 0 = DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxConns caps the connections Run serves at once; past it a few more
	// are accepted for /health, /ready and /metrics only, and the rest are
	// closed at once. 0 = DefaultMaxConns.
	MaxConns int
	// Plugins are the loaded WebAssembly plugins (nil = none): a template
	// plugin replaces the Template of the model it names, and grammar
	// plugins serve requests' "grammar": {"plugin": NAME, "source": …}.
	// The caller keeps ownership and closes the Set after the server stops.
	Plugins *plugin.Set
	// Metadata, when set, gives models prices, modalities, display names,
	// limits and a provider (/v1/models renders them); New refuses
	// entries for models it does not serve. UsageCost adds the cost of a
	// request, from the same prices, to its usage.
	Metadata  *Metadata
	UsageCost bool
	// Version is what /api/version reports (memra's build version).
	Version string
}

// Server is the HTTP API over one or more models.
type Server struct {
	cfg     Config
	models  []*Model
	byID    map[string]*Model
	keys    [][]byte
	log     *slog.Logger
	metrics *metrics
	handler http.Handler
	cons    *constraints // vocabularies and compiled schemas of structured output
	plugins *plugin.Set  // never nil: an empty Set when none are configured

	base       context.Context // cancelled to end every in-flight request
	cancelBase context.CancelFunc

	mu       sync.Mutex
	draining bool
	inflight int
	idle     chan struct{}    // closed when draining and inflight reaches 0
	failed   map[*Model]error // models out of service (modelfault.go)
}

// New checks cfg and builds the server.
func New(cfg Config) (*Server, error) {
	if len(cfg.Models) == 0 {
		return nil, fmt.Errorf("%w: no models", ErrConfig)
	}
	var keys [][]byte
	for _, k := range cfg.APIKeys {
		if k = strings.TrimSpace(k); k != "" {
			keys = append(keys, []byte(k))
		}
	}
	if err := CheckBind(cfg.Host, len(keys)); err != nil && !cfg.AllowPublicNoAuth {
		return nil, err
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = DefaultRetryAfter
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = DefaultReadTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StartTime.IsZero() {
		cfg.StartTime = time.Now()
	}
	s := &Server{cfg: cfg, byID: map[string]*Model{}, keys: keys, log: cfg.Logger, idle: make(chan struct{})}
	for i := range cfg.Models {
		m := &cfg.Models[i]
		if m.ID == "" || m.Engine == nil {
			return nil, fmt.Errorf("%w: model %d needs an id and an engine", ErrConfig, i)
		}
		if _, dup := s.byID[m.ID]; dup {
			return nil, fmt.Errorf("%w: model alias %q given twice", ErrConfig, m.ID)
		}
		if m.Created == 0 {
			m.Created = cfg.StartTime.Unix()
		}
		if m.OwnedBy == "" {
			m.OwnedBy = "memra"
		}
		s.models = append(s.models, m)
		s.byID[m.ID] = m
	}
	if err := s.usePlugins(cfg.Plugins); err != nil {
		return nil, err
	}
	if md := cfg.Metadata; md != nil {
		if err := md.checkModels(s.models); err != nil {
			return nil, err
		}
		for _, m := range s.models {
			m.Meta = md.Models[m.ID]
		}
	}
	for _, m := range s.models {
		if m.Pooling == runtime.PoolNone {
			continue
		}
		if ee, ok := m.Engine.(EmbedEngine); !ok || ee.EmbedWidth() == 0 {
			return nil, fmt.Errorf("%w: model %q pools by %v but its engine serves no embeddings", ErrConfig, m.ID, m.Pooling)
		}
	}
	s.base, s.cancelBase = context.WithCancel(context.Background())
	s.metrics = newMetrics(s.models)
	s.cons = newConstraints()
	s.handler = s.routes()
	return s, nil
}

// usePlugins checks that every template plugin names a served model and
// installs it as that model's template.
func (s *Server) usePlugins(set *plugin.Set) error {
	if set == nil {
		var err error
		if set, err = plugin.Open(context.Background(), plugin.SetConfig{}); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	if err := set.CheckModels(s.modelIDs()); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	for _, m := range s.models {
		if t, ok := set.Template(m.ID); ok {
			m.Template = t
		}
	}
	s.plugins = set
	return nil
}

// CheckBind refuses a non-loopback host when no API keys are configured.
// An empty host or 0.0.0.0 listens on every interface and counts as public.
func CheckBind(host string, keys int) error {
	if keys > 0 || isLoopback(host) {
		return nil
	}
	return fmt.Errorf("%w: --host %q is reachable from other machines; set --api-keys-file or MEMRA_API_KEYS, "+
		"or bind to 127.0.0.1", ErrPublicWithoutKeys, host)
}

func isLoopback(host string) bool {
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Handler is the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// route is one path's handlers by method, and its metrics label.
type route struct {
	methods map[string]http.HandlerFunc
	auth    bool
}

func (s *Server) routes() http.Handler {
	metricsHandler := promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})
	table := map[string]route{
		"/v1/chat/completions": {methods: map[string]http.HandlerFunc{"POST": s.handleChat}, auth: true},
		"/v1/completions":      {methods: map[string]http.HandlerFunc{"POST": s.handleCompletions}, auth: true},
		"/v1/embeddings":       {methods: map[string]http.HandlerFunc{"POST": s.handleEmbeddings}, auth: true},
		"/v1/responses":        {methods: map[string]http.HandlerFunc{"POST": s.handleResponses}, auth: true},
		"/api/chat":            {methods: map[string]http.HandlerFunc{"POST": s.handleOllamaChat}, auth: true},
		"/api/generate":        {methods: map[string]http.HandlerFunc{"POST": s.handleOllamaGenerate}, auth: true},
		"/api/tags":            {methods: map[string]http.HandlerFunc{"GET": s.handleOllamaTags}, auth: true},
		"/api/show":            {methods: map[string]http.HandlerFunc{"POST": s.handleOllamaShow}, auth: true},
		"/api/embed":           {methods: map[string]http.HandlerFunc{"POST": s.handleOllamaEmbed}, auth: true},
		"/api/embeddings":      {methods: map[string]http.HandlerFunc{"POST": s.handleOllamaEmbeddings}, auth: true},
		"/api/version":         {methods: map[string]http.HandlerFunc{"GET": s.handleOllamaVersion}, auth: true},
		"/v1/models":           {methods: map[string]http.HandlerFunc{"GET": s.handleModels}, auth: true},
		"/v1/models/{id}":      {methods: map[string]http.HandlerFunc{"GET": s.handleModel}, auth: true},
		"/metrics":             {methods: map[string]http.HandlerFunc{"GET": metricsHandler.ServeHTTP}, auth: true},
		"/health":              {methods: map[string]http.HandlerFunc{"GET": s.handleHealth}},
		"/ready":               {methods: map[string]http.HandlerFunc{"GET": s.handleReady}},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		name, rt, ok := lookupRoute(table, r.URL.Path)
		label := name
		if !ok {
			label = "unknown"
		}
		defer func() {
			if v := recover(); v != nil {
				s.log.Error("panic serving request", "path", r.URL.Path, "panic", v)
				if !rec.wrote {
					writeError(rec, &apiError{Status: http.StatusInternalServerError, Type: typeServer,
						Message: "internal server error"})
				}
			}
			s.metrics.requests.WithLabelValues(label, fmt.Sprint(rec.status)).Inc()
		}()
		s.limitBody(w, r)
		if onProbeConn(r) {
			rec.Header().Set("Connection", "close")
			if !probePaths[name] {
				writeError(rec, errTooManyConns(s.retryAfterSeconds()))
				return
			}
		}
		if !ok {
			closeUnread(rec, r)
			writeError(rec, &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Code: "not_found",
				Message: fmt.Sprintf("no endpoint %s %s", r.Method, r.URL.Path)})
			return
		}
		// The key is checked before anything reads the body; a refused
		// request's connection is closed rather than drained.
		if rt.auth {
			tenant, ok := s.authorized(r)
			if !ok {
				closeUnread(rec, r)
				writeError(rec, &apiError{Status: http.StatusUnauthorized, Type: typeAuthentication, Code: "invalid_api_key",
					Message: "missing or invalid API key: send Authorization: Bearer <key>"})
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant))
		}
		h := rt.methods[r.Method]
		if h == nil && r.Method == http.MethodHead {
			h = rt.methods[http.MethodGet]
		}
		if h == nil {
			var allow []string
			for m := range rt.methods {
				allow = append(allow, m)
			}
			rec.Header().Set("Allow", strings.Join(allow, ", "))
			closeUnread(rec, r)
			writeError(rec, &apiError{Status: http.StatusMethodNotAllowed, Type: typeInvalidRequest, Code: "method_not_allowed",
				Message: fmt.Sprintf("method %s is not allowed on %s; use %s", r.Method, r.URL.Path, strings.Join(allow, ", "))})
			return
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(rec, r.Body, s.cfg.MaxBody)
		}
		h(rec, r)
	})
}

// lookupRoute finds the route of path; "/v1/models/{id}" takes any id.
func lookupRoute(table map[string]route, path string) (string, route, bool) {
	if rt, ok := table[path]; ok {
		return path, rt, true
	}
	if id, ok := strings.CutPrefix(path, "/v1/models/"); ok && id != "" {
		return "/v1/models/{id}", table["/v1/models/{id}"], true
	}
	return "", route{}, false
}

// authorized checks the bearer key against every configured key in
// constant time and returns the tenant it names: the key's SHA-256, so
// that two keys never share cached KV pages (the prefix cache is scoped by
// tenant). With no keys every request passes, as the one tenant "".
func (s *Server) authorized(r *http.Request) (tenant string, ok bool) {
	if len(s.keys) == 0 {
		return "", true
	}
	auth := r.Header.Get("Authorization")
	scheme, key, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	got := []byte(strings.TrimSpace(key))
	match := 0
	for _, k := range s.keys {
		match |= subtle.ConstantTimeCompare(got, k)
	}
	if match != 1 {
		return "", false
	}
	sum := sha256.Sum256(got)
	return "key:" + string(sum[:]), true
}

// tenantKey is the request context's key of the tenant authorized found.
type tenantKey struct{}

// tenantOf returns the tenant of a request's context ("" without keys).
func tenantOf(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

// statusRecorder remembers the status for metrics and whether anything was
// written; Unwrap lets http.ResponseController reach Flush.
type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) handleReady(w http.ResponseWriter, _ *http.Request) {
	if s.isDraining() {
		writeError(w, errDraining(s.retryAfterSeconds()))
		return
	}
	if ids := s.failedModels(); len(ids) > 0 {
		writeError(w, notReadyFailed(ids))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// lookupModel resolves the request's "model"; empty picks the first model.
func (s *Server) lookupModel(id string) (*Model, *apiError) {
	if id == "" {
		return s.models[0], nil
	}
	if m, ok := s.byID[id]; ok {
		return m, nil
	}
	return nil, &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Param: "model", Code: "model_not_found",
		Message: fmt.Sprintf("The model %q does not exist; this server serves %s", id, strings.Join(s.modelIDs(), ", "))}
}

func (s *Server) modelIDs() []string {
	ids := make([]string, len(s.models))
	for i, m := range s.models {
		ids[i] = m.ID
	}
	return ids
}

// enter counts one in-flight generation; false while draining.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return false
	}
	s.inflight++
	return true
}

func (s *Server) leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight--
	if s.inflight == 0 && s.draining {
		close(s.idle)
	}
}

func (s *Server) isDraining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

// Drain stops admitting requests (they get 503, and /ready turns 503), lets
// in-flight generations finish, and returns when they have. When ctx ends
// first it cancels the rest and returns ctx's error.
func (s *Server) Drain(ctx context.Context) error {
	s.mu.Lock()
	if !s.draining {
		s.draining = true
		if s.inflight == 0 {
			close(s.idle)
		}
	}
	s.mu.Unlock()
	for _, m := range s.models {
		m.Engine.Drain()
	}
	select {
	case <-s.idle:
		return nil
	case <-ctx.Done():
		s.cancelBase()
		return fmt.Errorf("drain: in-flight requests cancelled: %w", ctx.Err())
	}
}

// Run serves on ln until ctx ends (SIGTERM, SIGINT), then drains for up to
// drainTimeout and shuts the listener down. A completed drain returns nil.
// It applies Config's ReadTimeout, IdleTimeout and MaxConns.
func (s *Server) Run(ctx context.Context, ln net.Listener, drainTimeout time.Duration) error {
	hs := &http.Server{Handler: s.handler, ReadHeaderTimeout: s.cfg.ReadTimeout, IdleTimeout: s.cfg.IdleTimeout,
		ConnContext: connContext, ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(&connLimiter{Listener: ln, max: s.cfg.MaxConns}) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	s.log.Info("draining", "timeout", drainTimeout)
	dctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	if err := s.Drain(dctx); err != nil {
		s.log.Warn("drain timed out", "err", err)
	}
	sctx, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("serve: shutdown: %w", err)
	}
	hs.Close()
	s.log.Info("stopped")
	return nil
}

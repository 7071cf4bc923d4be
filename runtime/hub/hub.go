// Package hub fetches models named by hf: specs from the Hugging Face hub
// (or any server that speaks its API: HF_ENDPOINT) into the hub's shared
// cache layout, so files downloaded by memra serve other tools and the
// other way round.
//
// A spec names a repository and what to take from it:
//
//	hf:OWNER/REPO               the checkpoint folder: config, tokenizer, safetensors shards
//	hf:OWNER/REPO:FILE.gguf     one GGUF file (every shard of a split one)
//	hf:OWNER/REPO:Q4_K_M        the GGUF file of that quantisation (shards included)
//	hf:OWNER/REPO@REVISION:…    a branch, tag or commit instead of main
//
// The cache is $HF_HUB_CACHE (default $HF_HOME/hub, HF_HOME defaulting to
// ~/.cache/huggingface): models--OWNER--REPO/blobs/ETAG holds each file once,
// snapshots/COMMIT/PATH links to it, refs/REVISION names the commit a
// branch was last seen at. A download goes to blobs/ETAG.incomplete, resumes
// from there after a cut (in the same call or a later one), is checked
// against the size and hash the hub reports (SHA-256 for LFS files, the git
// blob hash for the others), and only then renamed into place and linked,
// so no partial file is ever opened as a model. A lock file per blob keeps
// two processes sharing a cache from fetching the same file at once.
package hub

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Errors, wrapped with the spec, repository or file they concern.
var (
	// ErrSpec is a string that is not a valid hf: spec.
	ErrSpec = errors.New("hub: bad model spec")
	// ErrAuth is a 401 or 403: a private or gated repository (set HF_TOKEN).
	ErrAuth = errors.New("hub: not authorised")
	// ErrNotFound is a 404: no such repository, revision or file.
	ErrNotFound = errors.New("hub: not found")
	// ErrRateLimited is a 429 that outlasted the retries.
	ErrRateLimited = errors.New("hub: rate limited")
	// ErrTransfer is a download that failed on every attempt (connection
	// errors, server errors); its partial file stays for the next try.
	ErrTransfer = errors.New("hub: download failed")
	// ErrVerify is a download whose size or hash is not the hub's.
	ErrVerify = errors.New("hub: download does not match the hub's size or hash")
	// ErrOffline is a spec the cache cannot serve with HF_HUB_OFFLINE set.
	ErrOffline = errors.New("hub: not in the cache (offline)")
	// ErrSelect is a spec that matches no file, or several.
	ErrSelect = errors.New("hub: no single model matches")
)

// Prefix starts every spec.
const Prefix = "hf:"

// DefaultEndpoint is the hub's address when HF_ENDPOINT is unset.
const DefaultEndpoint = "https://huggingface.co"

// Spec is a parsed hf: spec.
type Spec struct {
	Repo     string // OWNER/REPO (or a legacy REPO without owner)
	Revision string // branch, tag or commit; "" is main
	File     string // a .gguf path in the repository, or ""
	Quant    string // a quantisation name (Q4_K_M), or ""
}

// IsSpec reports whether s is meant as an hf: spec.
func IsSpec(s string) bool { return strings.HasPrefix(s, Prefix) }

var (
	repoPart  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$`)
	quantName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)
)

// ParseSpec parses hf:OWNER/REPO[@REVISION][:FILE.gguf|:QUANT].
func ParseSpec(s string) (Spec, error) {
	rest, ok := strings.CutPrefix(s, Prefix)
	if !ok {
		return Spec{}, fmt.Errorf("%w: %q does not start with %s", ErrSpec, s, Prefix)
	}
	var sp Spec
	repo, sel, _ := strings.Cut(rest, ":")
	repo, sp.Revision, _ = strings.Cut(repo, "@")
	parts := strings.Split(repo, "/")
	if len(parts) > 2 {
		return Spec{}, fmt.Errorf("%w: %q: the repository is OWNER/REPO", ErrSpec, s)
	}
	for _, p := range parts {
		if !repoPart.MatchString(p) || strings.Contains(p, "--") || strings.Contains(p, "..") || strings.HasSuffix(p, ".") || strings.HasSuffix(p, "-") {
			return Spec{}, fmt.Errorf("%w: %q: %q is not a repository name", ErrSpec, s, p)
		}
	}
	sp.Repo = repo
	if strings.Contains(rest, "@") && sp.Revision == "" {
		return Spec{}, fmt.Errorf("%w: %q: empty revision after @", ErrSpec, s)
	}
	if strings.ContainsAny(sp.Revision, " \\") || strings.Contains(sp.Revision, "..") {
		return Spec{}, fmt.Errorf("%w: %q: bad revision %q", ErrSpec, s, sp.Revision)
	}
	switch {
	case strings.Contains(rest, ":") && sel == "":
		return Spec{}, fmt.Errorf("%w: %q: empty file or quantisation after :", ErrSpec, s)
	case strings.HasSuffix(strings.ToLower(sel), ".gguf"):
		if strings.HasPrefix(sel, "/") || strings.Contains(sel, "..") || strings.Contains(sel, "\\") {
			return Spec{}, fmt.Errorf("%w: %q: bad file %q", ErrSpec, s, sel)
		}
		sp.File = sel
	case sel != "":
		if !quantName.MatchString(sel) {
			return Spec{}, fmt.Errorf("%w: %q: %q is neither a .gguf file nor a quantisation name", ErrSpec, s, sel)
		}
		sp.Quant = sel
	}
	return sp, nil
}

// String returns the spec in its parsed form.
func (s Spec) String() string {
	out := Prefix + s.Repo
	if s.Revision != "" {
		out += "@" + s.Revision
	}
	if sel := s.File + s.Quant; sel != "" {
		out += ":" + sel
	}
	return out
}

// revision is the revision asked for, main by default.
func (s Spec) revision() string {
	if s.Revision == "" {
		return "main"
	}
	return s.Revision
}

// Client fetches specs into a cache. The zero value is not usable: build
// one with FromEnv (or fill every field).
type Client struct {
	Endpoint string // the hub's base URL, no trailing slash
	Token    string // sent as a bearer token to Endpoint (never to a redirect's other host)
	Cache    string // the hub cache folder ($HF_HUB_CACHE)
	Offline  bool   // take everything from the cache; make no request
	// HTTP makes the requests (FromEnv: no overall timeout, a minute for
	// response headers).
	HTTP *http.Client
	// Progress, when set, follows each download.
	Progress Progress
	// Logf receives notices (a fall-back to the cache when the hub cannot
	// be reached, a wait for another process's download); nil drops them.
	Logf func(format string, args ...any)
	// Attempts bounds the tries of one request or download: 429s, server
	// errors and broken connections are tried again (a download resumes
	// where it stopped). FromEnv: 5.
	Attempts int
	// MaxBackoff caps the wait between tries, Retry-After included
	// (FromEnv: 30 s).
	MaxBackoff time.Duration
	// Stall cancels a download attempt that receives nothing for this long
	// (FromEnv: 60 s).
	Stall time.Duration
	// UserAgent is sent with every request.
	UserAgent string
}

// Progress follows downloads: Update after each chunk with the bytes on
// disk, Done once the file is complete or has failed.
type Progress interface {
	Update(file string, size, have int64)
	Done(file string, err error)
}

// FromEnv builds a Client from the environment the hub's own tools read:
// HF_ENDPOINT, HF_TOKEN (else the token file: HF_TOKEN_PATH, default
// $HF_HOME/token), HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE.
func FromEnv() (*Client, error) {
	home := os.Getenv("HF_HOME")
	if home == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			h, err := os.UserHomeDir()
			if err != nil {
				return nil, fmt.Errorf("hub: cache folder: %w (set HF_HOME)", err)
			}
			base = filepath.Join(h, ".cache")
		}
		home = filepath.Join(base, "huggingface")
	}
	cache := os.Getenv("HF_HUB_CACHE")
	if cache == "" {
		cache = filepath.Join(home, "hub")
	}
	token := strings.TrimSpace(os.Getenv("HF_TOKEN"))
	if token == "" {
		path := os.Getenv("HF_TOKEN_PATH")
		if path == "" {
			path = filepath.Join(home, "token")
		}
		if b, err := os.ReadFile(path); err == nil {
			token = strings.TrimSpace(string(b))
		}
	}
	endpoint := strings.TrimRight(os.Getenv("HF_ENDPOINT"), "/")
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = time.Minute
	c := &Client{Endpoint: endpoint, Token: token, Cache: cache, Offline: truthy(os.Getenv("HF_HUB_OFFLINE")),
		Attempts: 5, MaxBackoff: 30 * time.Second, Stall: time.Minute, UserAgent: "memra"}
	c.HTTP = &http.Client{Transport: tr, CheckRedirect: c.redirect}
	return c, nil
}

// truthy reads a boolean environment value as the hub's tools do.
func truthy(v string) bool {
	switch strings.ToUpper(strings.TrimSpace(v)) {
	case "1", "ON", "YES", "TRUE":
		return true
	}
	return false
}

// redirect follows at most 10 redirects and drops the token when one
// leaves the host it was meant for (a storage host gets signed URLs).
func (c *Client) redirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if req.URL.Host != via[0].URL.Host {
		req.Header.Del("Authorization")
	}
	return nil
}

func (c *Client) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
	}
}

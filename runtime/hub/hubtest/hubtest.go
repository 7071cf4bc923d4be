// Package hubtest is a local server that speaks the parts of the Hugging
// Face hub's HTTP API that runtime/hub uses, as the hub documents them,
// with faults to order: model info (GET /api/models/REPO/revision/REV,
// ?blobs=true for sizes and hashes), file downloads (GET and HEAD
// /REPO/resolve/REV/PATH) that redirect LFS files to a second host serving
// byte ranges, 401 for a private repository without its token, 404 with
// the hub's X-Error-Code, 429 with Retry-After, and a connection cut in
// the middle of a file.
package hubtest

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// LFSFrom is the size from which a file is stored in LFS (redirected to
// the storage host) unless Repo.LFS says otherwise.
const LFSFrom = 1024

// Repo is one repository at one commit.
type Repo struct {
	ID      string
	Commit  string            // 40 hex digits
	Files   map[string][]byte // by repository path
	Private bool              // needs the hub's token
	// Branches name the commit besides "main".
	Branches []string
}

// Hub is the test server. Its fields and methods are safe for concurrent use.
type Hub struct {
	// URL is the hub's endpoint (HF_ENDPOINT); storage is the second host
	// that LFS downloads are redirected to.
	URL     string
	srv     *httptest.Server
	storage *httptest.Server

	mu       sync.Mutex
	repos    map[string]*Repo
	token    string
	requests []string // "METHOD PATH" of every request to either host
	limit    int      // the next requests answered 429
	cuts     map[string][]int64
	corrupt  map[string]bool // files served with their first byte changed
	noBlobs  bool            // model info ignores blobs=true
	authSeen []string        // Authorization headers that reached the storage host
}

// New starts a hub; Close stops it. token is what private repositories
// require ("" for none).
func New(token string) *Hub {
	h := &Hub{repos: map[string]*Repo{}, token: token, cuts: map[string][]int64{}, corrupt: map[string]bool{}}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serveHub))
	h.storage = httptest.NewServer(http.HandlerFunc(h.serveStorage))
	h.URL = h.srv.URL
	return h
}

// Close stops both hosts.
func (h *Hub) Close() {
	h.srv.Close()
	h.storage.Close()
}

// Add publishes a repository; its commit is derived from its files.
func (h *Hub) Add(id string, files map[string][]byte, private bool) *Repo {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	sum := sha1.New()
	for _, n := range names {
		fmt.Fprintf(sum, "%s\x00%x\x00", n, sha256.Sum256(files[n]))
	}
	r := &Repo{ID: id, Commit: hex.EncodeToString(sum.Sum(nil)), Files: files, Private: private}
	h.mu.Lock()
	h.repos[id] = r
	h.mu.Unlock()
	return r
}

// RateLimit answers the next n requests to the hub with 429.
func (h *Hub) RateLimit(n int) {
	h.mu.Lock()
	h.limit = n
	h.mu.Unlock()
}

// Cut makes the next downloads of file (a repository path) stop after the
// given byte counts, one download each: the connection is closed mid-body.
func (h *Hub) Cut(file string, after ...int64) {
	h.mu.Lock()
	h.cuts[file] = append(h.cuts[file], after...)
	h.mu.Unlock()
}

// Corrupt serves file (a repository path) with its first byte changed,
// while model info keeps reporting the true size and hash.
func (h *Hub) Corrupt(file string) {
	h.mu.Lock()
	h.corrupt[file] = true
	h.mu.Unlock()
}

// NoBlobs makes model info leave out sizes and hashes, as it does without
// blobs=true, so a client must ask the resolve endpoint (HEAD).
func (h *Hub) NoBlobs() {
	h.mu.Lock()
	h.noBlobs = true
	h.mu.Unlock()
}

// Requests returns the requests served so far ("GET /api/models/…") and
// forgets them.
func (h *Hub) Requests() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.requests
	h.requests = nil
	return r
}

// StorageAuth returns the Authorization headers the storage host received
// (a client must not forward the hub's token there).
func (h *Hub) StorageAuth() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.authSeen)
}

// sibling is a file as model info lists it with blobs=true.
type sibling struct {
	Name   string `json:"rfilename"`
	Size   int64  `json:"size"`
	BlobID string `json:"blobId"`
	LFS    *lfs   `json:"lfs,omitempty"`
}

type lfs struct {
	SHA256      string `json:"sha256"`
	Size        int64  `json:"size"`
	PointerSize int    `json:"pointerSize"`
}

// GitBlobID is the git blob hash of data.
func GitBlobID(data []byte) string {
	s := sha1.New()
	fmt.Fprintf(s, "blob %d\x00", len(data))
	s.Write(data)
	return hex.EncodeToString(s.Sum(nil))
}

// isLFS reports whether a file is served from the storage host.
func isLFS(data []byte) bool { return len(data) >= LFSFrom }

func (h *Hub) record(r *http.Request) {
	h.mu.Lock()
	h.requests = append(h.requests, r.Method+" "+r.URL.Path)
	h.mu.Unlock()
}

// hubError writes an error the way the hub does: a status, X-Error-Code
// and X-Error-Message, and a JSON body.
func hubError(w http.ResponseWriter, status int, code, msg string) {
	if code != "" {
		w.Header().Set("X-Error-Code", code)
	}
	w.Header().Set("X-Error-Message", msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// lookup finds a repository and checks the token and revision.
func (h *Hub) lookup(w http.ResponseWriter, r *http.Request, id, rev string) *Repo {
	h.mu.Lock()
	repo := h.repos[id]
	token := h.token
	h.mu.Unlock()
	if repo == nil {
		hubError(w, http.StatusNotFound, "RepoNotFound", "Repository Not Found for url: "+r.URL.String())
		return nil
	}
	if repo.Private && r.Header.Get("Authorization") != "Bearer "+token {
		hubError(w, http.StatusUnauthorized, "GatedRepo", "Access to model "+id+" is restricted. You must have access to it and be authenticated to access it.")
		return nil
	}
	if rev != "main" && rev != repo.Commit && !slices.Contains(repo.Branches, rev) {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return nil
	}
	return repo
}

// serveHub answers model info and resolve requests.
func (h *Hub) serveHub(w http.ResponseWriter, r *http.Request) {
	h.record(r)
	h.mu.Lock()
	limited := h.limit > 0
	if limited {
		h.limit--
	}
	h.mu.Unlock()
	if limited {
		w.Header().Set("Retry-After", "1")
		hubError(w, http.StatusTooManyRequests, "", "Too Many Requests")
		return
	}
	path := r.URL.Path
	if rest, ok := strings.CutPrefix(path, "/api/models/"); ok {
		id, rev, ok := strings.Cut(rest, "/revision/")
		if !ok {
			id, rev = rest, "main"
		}
		repo := h.lookup(w, r, id, rev)
		if repo == nil {
			return
		}
		h.serveInfo(w, r, repo)
		return
	}
	// /OWNER/REPO/resolve/REV/PATH (REPO without owner for legacy ids)
	i := strings.Index(path, "/resolve/")
	if i < 0 {
		hubError(w, http.StatusNotFound, "", "no such route")
		return
	}
	id := strings.TrimPrefix(path[:i], "/")
	rev, file, ok := strings.Cut(path[i+len("/resolve/"):], "/")
	if !ok {
		hubError(w, http.StatusNotFound, "EntryNotFound", "no file")
		return
	}
	repo := h.lookup(w, r, id, rev)
	if repo == nil {
		return
	}
	data, ok := repo.Files[file]
	if !ok {
		hubError(w, http.StatusNotFound, "EntryNotFound", "Entry not found: "+file)
		return
	}
	served := h.served(file, data)
	w.Header().Set("X-Repo-Commit", repo.Commit)
	if isLFS(data) {
		sum := sha256.Sum256(data)
		oid := hex.EncodeToString(sum[:])
		w.Header().Set("X-Linked-Etag", `"`+oid+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(data)))
		w.Header().Set("ETag", `"`+GitBlobID([]byte("version https://git-lfs.github.com/spec/v1\noid sha256:"+oid))+`"`)
		http.Redirect(w, r, h.storage.URL+"/"+repo.ID+"/"+oid+"?file="+file+"&sig=x", http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+GitBlobID(data)+`"`)
	http.ServeContent(w, r, file, time.Time{}, bytes.NewReader(served))
}

// served is what the hub sends for a file: its bytes, or a corrupt copy.
func (h *Hub) served(file string, data []byte) []byte {
	h.mu.Lock()
	bad := h.corrupt[file]
	h.mu.Unlock()
	if !bad || len(data) == 0 {
		return data
	}
	c := slices.Clone(data)
	c[0] ^= 0xff
	return c
}

// serveInfo answers model info.
func (h *Hub) serveInfo(w http.ResponseWriter, r *http.Request, repo *Repo) {
	h.mu.Lock()
	blobs := r.URL.Query().Get("blobs") == "true" && !h.noBlobs
	h.mu.Unlock()
	names := make([]string, 0, len(repo.Files))
	for n := range repo.Files {
		names = append(names, n)
	}
	slices.Sort(names)
	var sibs []sibling
	for _, n := range names {
		s := sibling{Name: n}
		if blobs {
			data := repo.Files[n]
			s.Size = int64(len(data))
			if isLFS(data) {
				sum := sha256.Sum256(data)
				s.LFS = &lfs{SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data)), PointerSize: 134}
				s.BlobID = GitBlobID([]byte(s.LFS.SHA256))
			} else {
				s.BlobID = GitBlobID(data)
			}
		}
		sibs = append(sibs, s)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"id": repo.ID, "modelId": repo.ID, "sha": repo.Commit, "private": repo.Private, "siblings": sibs})
}

// serveStorage serves LFS files by their SHA-256, with byte ranges, and
// cuts connections where told.
func (h *Hub) serveStorage(w http.ResponseWriter, r *http.Request) {
	h.record(r)
	h.mu.Lock()
	if a := r.Header.Get("Authorization"); a != "" {
		h.authSeen = append(h.authSeen, a)
	}
	h.mu.Unlock()
	i := strings.LastIndex(r.URL.Path, "/")
	id, oid := strings.TrimPrefix(r.URL.Path[:i], "/"), r.URL.Path[i+1:]
	file := r.URL.Query().Get("file")
	h.mu.Lock()
	repo := h.repos[id]
	var cut int64 = -1
	if q := h.cuts[file]; len(q) > 0 && r.Method == http.MethodGet {
		cut, h.cuts[file] = q[0], q[1:]
	}
	h.mu.Unlock()
	if repo == nil {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	data, ok := repo.Files[file]
	if sum := sha256.Sum256(data); !ok || hex.EncodeToString(sum[:]) != oid {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	data = h.served(file, data)
	if cut < 0 {
		http.ServeContent(w, r, file, time.Time{}, bytes.NewReader(data))
		return
	}
	// send the answer's headers and cut bytes of its body, then drop the connection
	start := int64(0)
	if rg := r.Header.Get("Range"); rg != "" {
		s, _, _ := strings.Cut(strings.TrimPrefix(rg, "bytes="), "-")
		start, _ = strconv.ParseInt(s, 10, 64)
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, len(data)-1, len(data)))
		w.Header().Set("Content-Length", strconv.FormatInt(int64(len(data))-start, 10))
		w.WriteHeader(http.StatusPartialContent)
	} else {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.WriteHeader(http.StatusOK)
	}
	end := min(start+cut, int64(len(data)))
	w.Write(data[start:end])
	w.(http.Flusher).Flush()
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
}

package hub

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime/format/gguf"
	"github.com/memra-ai/memra/runtime/hub/hubtest"
	"github.com/memra-ai/memra/runtime/load"
	"github.com/memra-ai/memra/runtime/load/builtin"
)

// ggufRepo is a repository of stories260K as a split Q4_K_M model (two
// shards), a single-file Q8_0 model, a README and a small config.
func ggufRepo(t *testing.T) map[string][]byte {
	t.Helper()
	f, err := gguf.Parse(builtin.Bytes())
	require.NoError(t, err)
	shards := make([]*bytes.Buffer, 2)
	require.NoError(t, gguf.WriteSplit(f, 2, func(i int) (io.Writer, error) {
		shards[i] = &bytes.Buffer{}
		return shards[i], nil
	}))
	return map[string][]byte{
		"README.md":                            []byte("# stories\n"),
		gguf.SplitName("stories-Q4_K_M", 0, 2): shards[0].Bytes(),
		gguf.SplitName("stories-Q4_K_M", 1, 2): shards[1].Bytes(),
		"stories-Q8_0.gguf":                    builtin.Bytes(),
	}
}

// progressLog records Progress calls.
type progressLog struct {
	mu      sync.Mutex
	updates map[string]int64 // the last have per file
	done    map[string]error
}

func (p *progressLog) Update(file string, size, have int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.updates == nil {
		p.updates = map[string]int64{}
	}
	p.updates[file] = have
}

func (p *progressLog) Done(file string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		p.done = map[string]error{}
	}
	p.done[file] = err
}

// testClient is FromEnv pointed at h, with a cache in a temporary folder
// and short waits.
func testClient(t *testing.T, h *hubtest.Hub, token string) *Client {
	t.Helper()
	t.Setenv("HF_HOME", t.TempDir())
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HF_ENDPOINT", h.URL+"/")
	t.Setenv("HF_TOKEN", token)
	t.Setenv("HF_HUB_OFFLINE", "")
	c, err := FromEnv()
	require.NoError(t, err)
	require.Equal(t, h.URL, c.Endpoint)
	c.MaxBackoff = 5 * time.Millisecond
	return c
}

func count(reqs []string, prefix string) int {
	n := 0
	for _, r := range reqs {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

func TestFetchQuantCachedOffline(t *testing.T) {
	h := hubtest.New("")
	defer h.Close()
	files := ggufRepo(t)
	repo := h.Add("owner/stories", files, false)
	c := testClient(t, h, "")
	p := &progressLog{}
	c.Progress = p
	sp, err := ParseSpec("hf:owner/stories:Q4_K_M")
	require.NoError(t, err)

	s, err := c.Fetch(context.Background(), sp)
	require.NoError(t, err)
	shard1, shard2 := gguf.SplitName("stories-Q4_K_M", 0, 2), gguf.SplitName("stories-Q4_K_M", 1, 2)
	require.Equal(t, []string{shard1, shard2}, s.Files)
	require.Equal(t, repo.Commit, s.Commit)
	require.Equal(t, int64(len(files[shard1])+len(files[shard2])), s.Downloaded)
	require.False(t, s.Cached)
	reqs := h.Requests()
	require.Equal(t, 1, count(reqs, "GET /api/models/owner/stories/revision/main"), reqs)
	require.Equal(t, 2, count(reqs, "GET /owner/stories/resolve/"+repo.Commit+"/"), reqs)
	require.Len(t, reqs, 5, "info, two resolves, two storage downloads: %v", reqs)
	require.Empty(t, h.StorageAuth())

	// the hub cache layout: blobs by SHA-256, snapshot links, the ref
	repoDir := filepath.Join(c.Cache, "models--owner--stories")
	for _, f := range []string{shard1, shard2} {
		sum := sha256.Sum256(files[f])
		blob := filepath.Join(repoDir, "blobs", hex.EncodeToString(sum[:]))
		got, err := os.ReadFile(blob)
		require.NoError(t, err)
		require.Equal(t, files[f], got)
		link := filepath.Join(repoDir, "snapshots", repo.Commit, f)
		target, err := os.Readlink(link)
		require.NoError(t, err)
		require.Equal(t, filepath.Join("..", "..", "blobs", hex.EncodeToString(sum[:])), target)
		require.Equal(t, int64(len(files[f])), p.updates[f])
		require.Contains(t, p.done, f)
		require.NoError(t, p.done[f])
	}
	ref, err := os.ReadFile(filepath.Join(repoDir, "refs", "main"))
	require.NoError(t, err)
	require.Equal(t, repo.Commit, string(ref))
	require.Equal(t, filepath.Join(repoDir, "snapshots", repo.Commit, shard1), s.Path)

	m, err := load.Open(s.Path)
	require.NoError(t, err)
	require.Equal(t, "llama", m.HParams.Arch)
	require.NoError(t, m.Close())

	// again: the revision check and nothing else
	s2, err := c.Fetch(context.Background(), sp)
	require.NoError(t, err)
	require.Zero(t, s2.Downloaded)
	require.Equal(t, []string{"GET /api/models/owner/stories/revision/main"}, h.Requests())
	require.Equal(t, s.Path, s2.Path)

	// offline: no request at all
	c.Offline = true
	s3, err := c.Fetch(context.Background(), sp)
	require.NoError(t, err)
	require.True(t, s3.Cached)
	require.Equal(t, s.Path, s3.Path)
	require.Empty(t, h.Requests())
	_, err = c.Fetch(context.Background(), Spec{Repo: "owner/stories", Quant: "Q8_0"})
	require.ErrorIs(t, err, ErrOffline, "not downloaded yet")
	require.Empty(t, h.Requests())

	// another quantisation of the same commit shares the snapshot
	c.Offline = false
	s4, err := c.Fetch(context.Background(), Spec{Repo: "owner/stories", Quant: "q8_0"})
	require.NoError(t, err)
	require.Equal(t, filepath.Join(repoDir, "snapshots", repo.Commit, "stories-Q8_0.gguf"), s4.Path)

	list, err := c.List()
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "owner/stories", list[0].Repo)
	require.Equal(t, map[string]string{"main": repo.Commit}, list[0].Refs)
	require.Equal(t, int64(len(files[shard1])+len(files[shard2])+len(files["stories-Q8_0.gguf"])), list[0].Size)
	require.Len(t, list[0].Snapshots, 1)
	require.Len(t, list[0].Snapshots[0].Files, 3)
}

func TestFetchResumesAfterCut(t *testing.T) {
	h := hubtest.New("")
	defer h.Close()
	files := ggufRepo(t)
	h.Add("owner/stories", files, false)
	c := testClient(t, h, "")
	const file = "stories-Q8_0.gguf"
	size := int64(len(files[file]))
	sp := Spec{Repo: "owner/stories", File: file}

	// one cut in the call: the second try asks for the rest only
	h.Cut(file, 100_000)
	s, err := c.Fetch(context.Background(), sp)
	require.NoError(t, err)
	require.Equal(t, size, s.Downloaded, "the bytes before the cut are not fetched again")
	got, err := os.ReadFile(s.Path)
	require.NoError(t, err)
	require.Equal(t, files[file], got)

	// a cut on the only try: no file in the snapshot, the part kept; the
	// next call resumes from it
	c2 := testClient(t, h, "")
	c2.Attempts = 1
	h.Cut(file, 300_000)
	_, err = c2.Fetch(context.Background(), sp)
	require.ErrorIs(t, err, ErrTransfer)
	snapFile := filepath.Join(c2.snapshotDir("owner/stories", s.Commit), file)
	_, err = os.Lstat(snapFile)
	require.ErrorIs(t, err, os.ErrNotExist, "a partial file is never linked")
	sum := sha256.Sum256(files[file])
	part := c2.blobPath("owner/stories", hex.EncodeToString(sum[:])) + ".incomplete"
	st, err := os.Stat(part)
	require.NoError(t, err)
	require.Equal(t, int64(300_000), st.Size())
	list, err := c2.List()
	require.NoError(t, err)
	require.Equal(t, int64(300_000), list[0].Partial)

	c2.Attempts = 5
	s, err = c2.Fetch(context.Background(), sp)
	require.NoError(t, err)
	require.Equal(t, size-300_000, s.Downloaded)
	got, err = os.ReadFile(s.Path)
	require.NoError(t, err)
	require.Equal(t, files[file], got)
	_, err = os.Stat(part)
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestFetchErrors(t *testing.T) {
	h := hubtest.New("secret")
	defer h.Close()
	files := ggufRepo(t)
	h.Add("owner/stories", files, false)
	h.Add("owner/private", files, true)
	ctx := context.Background()

	c := testClient(t, h, "")
	_, err := c.Fetch(ctx, Spec{Repo: "owner/private", Quant: "Q8_0"})
	require.ErrorIs(t, err, ErrAuth)
	require.ErrorContains(t, err, "HF_TOKEN")
	_, err = c.Fetch(ctx, Spec{Repo: "owner/missing"})
	require.ErrorIs(t, err, ErrNotFound)
	require.ErrorContains(t, err, "RepoNotFound")
	_, err = c.Fetch(ctx, Spec{Repo: "owner/stories", Revision: "v9", Quant: "Q8_0"})
	require.ErrorIs(t, err, ErrNotFound)
	_, err = c.Fetch(ctx, Spec{Repo: "owner/stories", Quant: "Q5_K_M"})
	require.ErrorIs(t, err, ErrSelect)
	require.ErrorContains(t, err, "hf:owner/stories:stories-Q8_0.gguf")

	// with the token: the hub gets it, the storage host never does
	c = testClient(t, h, "secret")
	_, err = c.Fetch(ctx, Spec{Repo: "owner/private", Quant: "Q8_0"})
	require.NoError(t, err)
	require.Empty(t, h.StorageAuth())

	// 429: waited out within the tries, or reported after them
	c = testClient(t, h, "")
	h.RateLimit(2)
	_, err = c.Fetch(ctx, Spec{Repo: "owner/stories", Quant: "Q8_0"})
	require.NoError(t, err)
	c = testClient(t, h, "")
	c.Attempts = 3
	h.RateLimit(3)
	_, err = c.Fetch(ctx, Spec{Repo: "owner/stories", Quant: "Q8_0"})
	require.ErrorIs(t, err, ErrRateLimited)
	h.RateLimit(0)

	// a corrupt download fails its hash and leaves nothing behind
	c = testClient(t, h, "")
	h.Corrupt("stories-Q8_0.gguf")
	_, err = c.Fetch(ctx, Spec{Repo: "owner/stories", Quant: "Q8_0"})
	require.ErrorIs(t, err, ErrVerify)
	list, err := c.List()
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Zero(t, list[0].Size+list[0].Partial)
	for _, s := range list[0].Snapshots {
		require.Empty(t, s.Files)
	}
	// so does a small (non-LFS) file, checked by its git blob hash
	h.Add("owner/small", map[string][]byte{"tiny-Q4_0.gguf": []byte("GGUF not really")}, false)
	h.Corrupt("tiny-Q4_0.gguf")
	_, err = c.Fetch(ctx, Spec{Repo: "owner/small", Quant: "Q4_0"})
	require.ErrorIs(t, err, ErrVerify)
}

func TestFetchNoBlobsUsesHead(t *testing.T) {
	h := hubtest.New("")
	defer h.Close()
	files := ggufRepo(t)
	h.Add("owner/stories", files, false)
	h.NoBlobs()
	c := testClient(t, h, "")
	s, err := c.Fetch(context.Background(), Spec{Repo: "owner/stories", Quant: "Q8_0"})
	require.NoError(t, err)
	require.Equal(t, 1, count(h.Requests(), "HEAD /owner/stories/resolve/"))
	got, err := os.ReadFile(s.Path)
	require.NoError(t, err)
	require.Equal(t, files["stories-Q8_0.gguf"], got)
}

func TestFetchUnreachableUsesCache(t *testing.T) {
	h := hubtest.New("")
	files := ggufRepo(t)
	h.Add("owner/stories", files, false)
	c := testClient(t, h, "")
	var notes []string
	c.Logf = func(f string, a ...any) { notes = append(notes, f) }
	sp := Spec{Repo: "owner/stories", Quant: "Q8_0"}
	s, err := c.Fetch(context.Background(), sp)
	require.NoError(t, err)
	h.Close()
	c.Attempts = 1
	s2, err := c.Fetch(context.Background(), sp)
	require.NoError(t, err)
	require.True(t, s2.Cached)
	require.Equal(t, s.Path, s2.Path)
	require.Len(t, notes, 1)
	_, err = c.Fetch(context.Background(), Spec{Repo: "owner/other"})
	require.Error(t, err)
}

func TestFetchFolder(t *testing.T) {
	h := hubtest.New("")
	defer h.Close()
	big := bytes.Repeat([]byte("w"), 5000)
	index := []byte(`{"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}`)
	h.Add("owner/ckpt", map[string][]byte{
		"config.json": []byte(`{}`), "tokenizer.json": []byte(`{}`), indexFile: index,
		"model-00001-of-00002.safetensors": big, "model-00002-of-00002.safetensors": big[1:],
		"consolidated.safetensors": big, "original/params.json": []byte(`{}`), "pytorch_model.bin": big,
	}, false)
	c := testClient(t, h, "")
	s, err := c.Fetch(context.Background(), Spec{Repo: "owner/ckpt"})
	require.NoError(t, err)
	require.Equal(t, s.Dir, s.Path)
	names, err := c.snapshotFiles("owner/ckpt", s.Commit)
	require.NoError(t, err)
	require.Equal(t, []string{"config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", indexFile, "tokenizer.json"}, names)
	// identical bytes are one blob
	list, err := c.List()
	require.NoError(t, err)
	require.Equal(t, int64(2+len(index)+len(big)+len(big)-1), list[0].Size, "config.json and tokenizer.json hold the same bytes")
}

func TestRedirectDropsToken(t *testing.T) {
	c := &Client{}
	a, _ := http.NewRequest(http.MethodGet, "https://hub.example/x", nil)
	b, _ := http.NewRequest(http.MethodGet, "https://hub.example/y", nil)
	b.Header.Set("Authorization", "Bearer t")
	require.NoError(t, c.redirect(b, []*http.Request{a}))
	require.Equal(t, "Bearer t", b.Header.Get("Authorization"), "same host keeps the token")
	s, _ := http.NewRequest(http.MethodGet, "https://cdn.hub.example/y", nil)
	s.Header.Set("Authorization", "Bearer t")
	require.NoError(t, c.redirect(s, []*http.Request{a}))
	require.Empty(t, s.Header.Get("Authorization"), "another host, even a subdomain, does not")
}

// TestFetchUsesAnotherToolsCache: a snapshot the hub's own tools wrote (a
// link into blobs/, or a copied file where links are not made) serves
// without a download.
func TestFetchUsesAnotherToolsCache(t *testing.T) {
	h := hubtest.New("")
	defer h.Close()
	files := ggufRepo(t)
	repo := h.Add("owner/stories", files, false)
	c := testClient(t, h, "")
	dir := filepath.Join(c.Cache, "models--owner--stories")
	sum := sha256.Sum256(files["stories-Q8_0.gguf"])
	blob := filepath.Join(dir, "blobs", hex.EncodeToString(sum[:]))
	require.NoError(t, os.MkdirAll(filepath.Dir(blob), 0o755))
	require.NoError(t, os.WriteFile(blob, files["stories-Q8_0.gguf"], 0o644))
	snap := filepath.Join(dir, "snapshots", repo.Commit)
	require.NoError(t, os.MkdirAll(snap, 0o755))
	require.NoError(t, os.Symlink(filepath.Join("..", "..", "blobs", hex.EncodeToString(sum[:])), filepath.Join(snap, "stories-Q8_0.gguf")))
	shard := gguf.SplitName("stories-Q4_K_M", 0, 2)
	require.NoError(t, os.WriteFile(filepath.Join(snap, shard), files[shard], 0o644)) // a copy
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "refs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "refs", "main"), []byte(repo.Commit), 0o644))

	s, err := c.Fetch(context.Background(), Spec{Repo: "owner/stories", Quant: "Q8_0"})
	require.NoError(t, err)
	require.Zero(t, s.Downloaded)
	require.Equal(t, []string{"GET /api/models/owner/stories/revision/main"}, h.Requests())
	s, err = c.Fetch(context.Background(), Spec{Repo: "owner/stories", Quant: "Q4_K_M"})
	require.NoError(t, err)
	second := gguf.SplitName("stories-Q4_K_M", 1, 2)
	require.Equal(t, int64(len(files[second])), s.Downloaded, "only the shard the cache lacked")
}

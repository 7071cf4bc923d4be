package main

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/runtime/format/gguf"
	"github.com/memra-ai/memra/runtime/hub/hubtest"
	"github.com/memra-ai/memra/runtime/load/builtin"
)

// testHub serves owner/stories: stories260K as a split Q4_K_M model (two
// shards) and a single Q8_0 file. The environment points the hub's
// variables at it and at an empty cache.
func testHub(t *testing.T) (*hubtest.Hub, *hubtest.Repo, string) {
	t.Helper()
	f, err := gguf.Parse(builtin.Bytes())
	require.NoError(t, err)
	shards := make([]*bytes.Buffer, 2)
	require.NoError(t, gguf.WriteSplit(f, 2, func(i int) (io.Writer, error) {
		shards[i] = &bytes.Buffer{}
		return shards[i], nil
	}))
	h := hubtest.New("")
	t.Cleanup(h.Close)
	repo := h.Add("owner/stories", map[string][]byte{
		"README.md":                            []byte("stories260K\n"),
		gguf.SplitName("stories-Q4_K_M", 0, 2): shards[0].Bytes(),
		gguf.SplitName("stories-Q4_K_M", 1, 2): shards[1].Bytes(),
		"stories-Q8_0.gguf":                    builtin.Bytes(),
	}, false)
	home := t.TempDir()
	t.Setenv("HF_HOME", home)
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HF_ENDPOINT", h.URL)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HUB_OFFLINE", "")
	return h, repo, filepath.Join(home, "hub")
}

const storyStart = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."

func count(reqs []string, prefix string) int {
	n := 0
	for _, r := range reqs {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

// TestRunHFSpec is the "done when" of hf: specs: memra run fetches a split
// quantisation once (a progress bar, a cut connection resumed, each file
// verified), runs it, and later runs cost the revision check alone, or
// nothing offline.
func TestRunHFSpec(t *testing.T) {
	h, repo, cache := testHub(t)
	shard1 := gguf.SplitName("stories-Q4_K_M", 0, 2)
	h.Cut(shard1, 200_000)
	run := func() (string, string) {
		cmd := newRunCmd()
		return execute(t, cmd, func(o, e *bytes.Buffer) { cmd.SetOut(o); cmd.SetErr(e) },
			"hf:owner/stories:Q4_K_M", "--device", "cpu", "--temperature", "0", "--max-tokens", "40", "--threads", "2")
	}
	out, errOut := run()
	require.True(t, strings.HasPrefix(out, storyStart), out)
	require.Contains(t, errOut, shard1)
	require.Contains(t, errOut, "100%", "a progress bar per file")
	require.Contains(t, errOut, "downloaded")
	reqs := h.Requests()
	require.Equal(t, 1, count(reqs, "GET /api/models/owner/stories/revision/main"), reqs)
	require.Equal(t, 2, count(reqs, "GET /owner/stories/resolve/"+repo.Commit+"/"+shard1), "the cut and the resumed try: %v", reqs)
	require.Equal(t, 1, count(reqs, "GET /owner/stories/resolve/"+repo.Commit+"/"+gguf.SplitName("stories-Q4_K_M", 1, 2)), reqs)
	require.Len(t, reqs, 7, "info, three resolves, three storage downloads: %v", reqs)

	out2, errOut2 := run()
	require.Equal(t, out, out2)
	require.NotContains(t, errOut2, "100%", "nothing downloaded")
	require.Equal(t, []string{"GET /api/models/owner/stories/revision/main"}, h.Requests())

	t.Setenv("HF_HUB_OFFLINE", "1")
	out3, _ := run()
	require.Equal(t, out, out3)
	require.Empty(t, h.Requests())

	// pull prints the path, ls shows the cache
	t.Setenv("HF_HUB_OFFLINE", "")
	pull := newPullCmd()
	path, _ := execute(t, pull, func(o, e *bytes.Buffer) { pull.SetOut(o); pull.SetErr(e) }, "hf:owner/stories:Q8_0")
	require.Equal(t, filepath.Join(cache, "models--owner--stories", "snapshots", repo.Commit, "stories-Q8_0.gguf")+"\n", path)
	ls := newLsCmd()
	list, _ := execute(t, ls, func(o, e *bytes.Buffer) { ls.SetOut(o); ls.SetErr(e) }, "--files")
	require.Contains(t, list, "owner/stories")
	require.Contains(t, list, "main="+repo.Commit[:12])
	require.Contains(t, list, "stories-Q8_0.gguf")
	require.Contains(t, list, shard1)
}

func TestHFSpecErrors(t *testing.T) {
	testHub(t)
	fails := func(cmd *cobra.Command, args ...string) error {
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		cmd.SetArgs(args)
		return cmd.Execute()
	}
	require.ErrorContains(t, fails(newRunCmd(), "hf:owner/stories:Q5_K_M", "--device", "cpu"),
		"hf:owner/stories:stories-Q8_0.gguf", "the error names what there is")
	require.ErrorContains(t, fails(newRunCmd(), "hf:owner/missing", "--device", "cpu"), "RepoNotFound")
	require.ErrorContains(t, fails(newPullCmd(), "./model.gguf"), "not an hf: spec")
	require.Equal(t, "stories", aliasOf("hf:owner/stories:Q4_K_M"))
}

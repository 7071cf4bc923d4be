package report

import (
	"bytes"
	"encoding/xml"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memra-ai/memra/autotune"
	"github.com/memra-ai/memra/codegen"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

// result builds a decode-attention result with a winner, a default, a
// failed (wrong) arm, a compile failure and an arm never measured.
func result(t *testing.T) autotune.Result {
	sp, err := codegen.SpaceByName("attn_decode")
	require.NoError(t, err)
	times := map[string]float64{"t128_c256": 21.5, "t256_c512": 14.25, "t64_c64": 30, "t256_c128": 18}
	r := autotune.Result{Task: autotune.Task{Family: "attn_decode", Class: "h32_8_d128_f16", Label: "decode", Space: sp}, Strategy: "exhaustive"}
	for _, p := range sp.Arms()[:7] {
		a := autotune.ArmResult{Arm: p, Name: sp.ArmName(p), Round: -1}
		if us, ok := times[a.Name]; ok {
			a.Round, a.Meas = 0, autotune.Measurement{TimeUS: us, Samples: 20, Tol: 1e-4}
		}
		r.Arms = append(r.Arms, a)
	}
	r.Arms = append(r.Arms,
		autotune.ArmResult{Arm: codegen.DecodeArm{Threads: 256, Chunk: 512}.Point(), Name: "t256_c512", Round: 0, Meas: autotune.Measurement{TimeUS: 14.25, Samples: 20, Tol: 1e-4}},
		autotune.ArmResult{Arm: codegen.DecodeArm{Threads: 256, Chunk: 1024}.Point(), Name: "t256_c1024", Round: 0, Failed: true,
			Reason: "rel. error 0.31 above tolerance 0.0001", Meas: autotune.Measurement{TimeUS: 3, RelErr: 0.31, Tol: 1e-4}},
		autotune.ArmResult{Arm: codegen.DecodeArm{Threads: 256, Chunk: 128}.Point(), Name: "t256_c128", Round: 0, Meas: autotune.Measurement{TimeUS: 18, Tol: 1e-4}},
		autotune.ArmResult{Arm: codegen.DecodeArm{Threads: 128, Chunk: 256}.Point(), Name: "t128_c256", Round: 0, Meas: autotune.Measurement{TimeUS: 21.5, Tol: 1e-4}},
		autotune.ArmResult{Name: "t64_c4096", Failed: true, Reason: "compile: nvrtc <error> & \"quotes\"", Round: -1},
	)
	for i := range r.Arms {
		switch r.Arms[i].Name {
		case "t256_c512":
			r.Best = &r.Arms[i]
		case "t256_c128":
			r.RunnerUp = &r.Arms[i]
		case "t128_c256":
			r.Default = &r.Arms[i]
		}
		if r.Arms[i].Round >= 0 || r.Arms[i].Failed {
			r.Tried++
		}
	}
	return r
}

func golden(t *testing.T, name string, got []byte) {
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "go test ./autotune/report -update")
	require.Equal(t, string(want), string(got))
}

func TestSVGGolden(t *testing.T) {
	r := result(t)
	var buf bytes.Buffer
	require.NoError(t, SVG(&buf, r))
	golden(t, "attn_decode.svg", buf.Bytes())
	// well-formed XML, the winner green, the failures marked
	require.NoError(t, xml.Unmarshal(buf.Bytes(), new(struct{})))
	s := buf.String()
	require.Equal(t, 1, strings.Count(s, "#2e9e4f"), "one winner bar")
	require.Equal(t, 2, strings.Count(s, "✗"), "two failed arms")
	require.Less(t, strings.Index(s, ">t256_c512<"), strings.Index(s, ">t256_c128<"), "fastest first")
	require.Contains(t, s, "&lt;error&gt; &amp; &#34;quotes&#34;")
}

func TestMarkdownGolden(t *testing.T) {
	r := result(t)
	sp, _ := codegen.SpaceByName("gemv")
	none := autotune.Result{Task: autotune.Task{Family: "gemv", Class: "q4_k_n6144_k4096", Label: "qkv", Space: sp}, Strategy: "halving", OutOfTime: true}
	var buf bytes.Buffer
	require.NoError(t, Markdown(&buf, []autotune.Result{r, none}, Meta{Device: "nvidia-h200.sm90.132sm.140gib", Card: "NVIDIA H200 (driver 13000)",
		Date: "2026-12-02", Version: "test", Budget: "10m0s", Model: "llama3-8b"}))
	golden(t, "report.md", buf.Bytes())
	require.Contains(t, buf.String(), "| 1.51× |")
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	r := result(t)
	require.NoError(t, Write(dir, []autotune.Result{r}, Meta{}))
	_, err := os.Stat(filepath.Join(dir, "attn_decode__h32_8_d128_f16.svg"))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(dir, "report.md"))
	require.NoError(t, err)
}

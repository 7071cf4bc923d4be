package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/memra-ai/memra/internal/plot"
	"github.com/memra-ai/memra/runtime"
	"github.com/memra-ai/memra/runtime/cpu"
	"github.com/memra-ai/memra/runtime/cuda"
	"github.com/memra-ai/memra/runtime/load"
)

// Roofline measurement sizes.
const (
	rooflineCopyBytes = 2 << 30 // bytes of the device-to-device copy
	rooflineMatmul    = 8192    // m = n = k of the bf16 product
	rooflineReps      = 5
)

// roofline is what the same run measured of the device.
type roofline struct {
	Card         string  `json:"card"`
	Driver       string  `json:"driver"`
	CopyBytes    int64   `json:"copy_bytes"`
	CopyBW       float64 `json:"copy_bytes_per_s"` // read + write
	MatmulKernel string  `json:"matmul_kernel"`
	MatmulDims   [3]int  `json:"matmul_mnk"`
	MatmulTFLOPs float64 `json:"matmul_tflops"`
	// OwnKernel and OwnTFLOPs are memra's own bf16 product at the same size
	// when the reference above is cuBLASLt's (empty otherwise).
	OwnKernel string  `json:"own_matmul_kernel,omitempty"`
	OwnTFLOPs float64 `json:"own_matmul_tflops,omitempty"`
	// CPU is the CPU's measurement (the fields above then hold its copy
	// and its FMA peak), nil on a GPU.
	CPU *cpu.Peak `json:"cpu,omitempty"`
}

// CPU roofline sizes: the copy is well past the caches of a desktop or a
// small VM (and half of a large L3 each way).
const (
	cpuCopyBytes = 512 << 20
	cpuPeakReps  = 3
)

// measureCPURoofline times the copy and the peaks on the threads the
// backend uses.
func (r *benchReport) measureCPURoofline(threads int, stderr io.Writer) {
	fmt.Fprintf(stderr, "bench: roofline: timing a %d MiB copy, an FMA loop and an int8 multiply-add loop on the CPU\n", cpuCopyBytes>>20)
	p := cpu.MeasurePeak(threads, cpuCopyBytes, cpuPeakReps)
	r.roof = &roofline{Card: p.Model, Driver: p.Kernels + " int8 kernels", CopyBytes: p.CopyBytes, CopyBW: p.CopyBW,
		MatmulKernel: "fma32 " + p.FMAUnit, MatmulTFLOPs: p.FMAFLOPs / 1e12, CPU: &p}
}

// benchReport turns results into the table, JSON, plot and PERFORMANCE.md rows.
type benchReport struct {
	model   *load.Model
	info    runtime.ModelInfo
	opts    *benchOptions
	results []benchResult
	roof    *roofline
	// products is the CPU backend's class of products ("int8", "exact"),
	// empty on a GPU.
	products string
}

// modelCost is what one decode step reads and what prefill multiplies.
type modelCost struct {
	FileBytes int64 // all tensor bytes
	Params    int64 // all tensor elements
	// DecodeBytes is the weight bytes one token's decode step reads: every
	// tensor, one embedding row, and of a mixture of experts' stacked
	// expert tensors the share of the experts a token uses
	// (ExpertsUsed/Experts: its active weights).
	DecodeBytes int64
	MatParams   int64 // elements of the weight matrices of the products
	// ExpertBytes is the bytes of the stacked expert tensors
	// (blk.N.ffn_{gate,up,down}_exps), all experts; Experts and
	// ExpertsUsed are the model's (0 for a dense model).
	ExpertBytes          int64
	Experts, ExpertsUsed int
	denseBytes           int64 // DecodeBytes without the expert tensors' share
}

// expertShare is the share of the experts a decode step of batch tokens
// reads: 1 − (1 − k/E)^batch, the expected distinct experts of batch
// tokens that each choose k of E uniformly (k/E at one token); 0 for a
// dense model.
func (c modelCost) expertShare(batch int) float64 {
	if c.Experts <= 0 {
		return 0
	}
	return 1 - math.Pow(1-float64(c.ExpertsUsed)/float64(c.Experts), float64(max(batch, 1)))
}

// expertNote says, for a mixture of experts, which share of the expert
// tensors a step of batch tokens is counted as reading ("" for a dense
// model).
func (c modelCost) expertNote(batch int) string {
	if c.Experts <= 0 {
		return ""
	}
	if batch <= 1 {
		return fmt.Sprintf(" (active weights: %d of %d experts a token)", c.ExpertsUsed, c.Experts)
	}
	return fmt.Sprintf(" (%.1f of %d experts expected for %d tokens choosing %d each)", c.expertShare(batch)*float64(c.Experts), c.Experts, batch, c.ExpertsUsed)
}

// stepBytes is the weight bytes a decode step of batch tokens reads: the
// dense part once, and the expected share of the expert tensors.
func (c modelCost) stepBytes(batch int) float64 {
	return float64(c.denseBytes) + float64(c.ExpertBytes)*c.expertShare(batch)
}

// tensorBytes returns the bytes of t (rows × row bytes), without reading it.
func tensorBytes(t *load.Tensor) (int64, int64) {
	if len(t.Shape) == 0 {
		return 0, 0
	}
	rows, elems := int64(1), int64(t.Shape[0])
	for _, d := range t.Shape[1:] {
		rows *= int64(d)
		elems *= int64(d)
	}
	rb, err := t.Type.RowBytes(t.Shape[0])
	if err != nil {
		return 0, elems
	}
	return rows * int64(rb), elems
}

// costOf sums m's tensors. The token embedding is read one row per token
// unless it is also the output projection (no output.weight), which reads
// it whole; 1-D tensors (norms, biases) count as bytes read but not as
// product parameters.
func costOf(m *load.Model) modelCost {
	var c modelCost
	_, tied := m.Tensors["output.weight"]
	tied = !tied
	hp := m.HParams
	if hp.Experts > 0 && hp.ExpertsUsed > 0 {
		c.Experts, c.ExpertsUsed = hp.Experts, hp.ExpertsUsed
	}
	for name, t := range m.Tensors {
		b, n := tensorBytes(t)
		c.FileBytes += b
		c.Params += n
		isEmbd := name == "token_embd.weight"
		switch {
		case isEmbd && !tied:
			if rows := n / int64(max(t.Shape[0], 1)); rows > 0 {
				c.denseBytes += b / rows
			}
		case c.Experts > 0 && isExpertTensor(name):
			c.ExpertBytes += b
		default:
			c.denseBytes += b
		}
		if len(t.Shape) >= 2 && (!isEmbd || tied) {
			c.MatParams += n
		}
	}
	c.DecodeBytes = int64(c.stepBytes(1))
	return c
}

// isExpertTensor reports whether the tensor name is a stacked expert
// tensor of a mixture of experts (blk.N.ffn_{gate,up,down}_exps.weight).
func isExpertTensor(name string) bool {
	for _, p := range []string{"ffn_gate_exps.", "ffn_up_exps.", "ffn_down_exps."} {
		if strings.Contains(name, p) {
			return true
		}
	}
	return false
}

// attnFLOPs is the causal attention work of prefilling p tokens from
// position 0: per layer and head, QKᵀ and PV over p(p+1)/2 pairs, 2 FLOPs
// per multiply-add.
func attnFLOPs(layers, heads, headDim, p int) float64 {
	return 4 * float64(layers) * float64(heads) * float64(headDim) * float64(p) * float64(p+1) / 2
}

// measureRoofline times the copy and the product on b's device.
func (r *benchReport) measureRoofline(b runtime.Backend, stderr io.Writer) error {
	cb, ok := b.(*cuda.Backend)
	if !ok {
		return fmt.Errorf("bench: --roofline needs a CUDA device")
	}
	dev := cb.Device()
	info := dev.Info()
	fmt.Fprintf(stderr, "bench: roofline: timing a %d GiB device copy and a %d³ bf16 product\n", rooflineCopyBytes>>30, rooflineMatmul)
	bw, err := cuda.CopyBandwidth(dev, rooflineCopyBytes, rooflineReps)
	if err != nil {
		return fmt.Errorf("bench: copy bandwidth: %w", err)
	}
	mm, err := cuda.MatmulThroughput(dev, rooflineMatmul, rooflineMatmul, rooflineMatmul, rooflineReps, cb.MMAArm(), "")
	if err != nil {
		return fmt.Errorf("bench: matmul throughput: %w", err)
	}
	r.roof = &roofline{Card: info.Name, Driver: driverString(info.DriverVersion), CopyBytes: rooflineCopyBytes, CopyBW: bw,
		MatmulKernel: mm.Kernel, MatmulDims: [3]int{mm.M, mm.N, mm.K}, MatmulTFLOPs: mm.TFLOPs()}
	// the card's own rate, where cuBLASLt is there, is the reference; ours is noted beside it
	if err := cuda.BLASAvailable(); err != nil {
		fmt.Fprintf(stderr, "bench: roofline: no cuBLASLt (%v); prefill is measured against memra's own product\n", err)
		return nil
	}
	bl, err := cuda.BLASThroughput(dev, rooflineMatmul, rooflineMatmul, rooflineMatmul, rooflineReps)
	if err != nil {
		return fmt.Errorf("bench: cuBLASLt matmul throughput: %w", err)
	}
	r.roof.OwnKernel, r.roof.OwnTFLOPs = r.roof.MatmulKernel, r.roof.MatmulTFLOPs
	r.roof.MatmulKernel, r.roof.MatmulTFLOPs = bl.Kernel, bl.TFLOPs()
	return nil
}

// driverString renders cuDriverGetVersion's 13000 as "CUDA 13.0".
func driverString(v int) string { return fmt.Sprintf("CUDA %d.%d", v/1000, v%1000/10) }

// benchRow is one result with its statistics, the JSON form.
type benchRow struct {
	Test     string    `json:"test"`
	Batch    int       `json:"batch"`
	N        int       `json:"n"`
	Rates    []float64 `json:"tokens_per_s"`
	Median   float64   `json:"median"`
	Min      float64   `json:"min"`
	Max      float64   `json:"max"`
	GBs      float64   `json:"weight_gb_per_s,omitempty"` // tg: weight bytes × steps/s
	TFLOPs   float64   `json:"tflops,omitempty"`          // pp
	Roofline float64   `json:"roofline_fraction,omitempty"`
}

func (r *benchReport) rows() []benchRow {
	cost := costOf(r.model)
	hp := r.model.HParams
	var out []benchRow
	for _, res := range r.results {
		s := slices.Clone(res.rates)
		slices.Sort(s)
		med := medianOf(s)
		row := benchRow{Test: res.test, Batch: res.batch, N: len(s), Rates: res.rates, Median: med, Min: s[0], Max: s[len(s)-1]}
		if r.roof != nil {
			if res.tg {
				row.GBs = cost.stepBytes(res.batch) * med / float64(res.batch) / 1e9
				row.Roofline = row.GBs * 1e9 / r.roof.CopyBW
			} else {
				p := r.promptLen(res.test)
				flops := 2*float64(cost.MatParams)*float64(p) + attnFLOPs(hp.Layers, hp.Heads, hp.HeadDim, p)
				row.TFLOPs = flops / (float64(p) / med) / 1e12
				row.Roofline = row.TFLOPs / r.roof.MatmulTFLOPs
			}
		}
		out = append(out, row)
	}
	return out
}

// promptLen reads P back from "ppP".
func (r *benchReport) promptLen(test string) int {
	var p int
	_, _ = fmt.Sscanf(test, "pp%d", &p)
	return p
}

// write prints the table (and the roofline, perf rows) and writes the
// JSON and plot files.
func (r *benchReport) write(w io.Writer) error {
	rows := r.rows()
	cost := costOf(r.model)
	name := r.info.Name
	if name == "" {
		name = r.model.HParams.Arch
	}
	if r.model.FileType != "" {
		name += " " + r.model.FileType
	}
	threads := fmt.Sprint(r.opts.threads)
	if r.opts.threads == 0 {
		threads = "all"
	}
	head := []string{"model", "size", "params", "backend", "threads", "test", "batch", "t/s (median)", "min–max"}
	onCPU := r.roof != nil && r.roof.CPU != nil
	if r.roof != nil {
		if onCPU {
			head = append(head, "GB/s or GFLOP/s", "roofline %")
		} else {
			head = append(head, "GB/s | TFLOP/s", "roofline %")
		}
	}
	table := [][]string{head}
	for _, row := range rows {
		line := []string{name, humanBytes(cost.FileBytes), humanCount(cost.Params), r.info.Device, threads, row.Test, fmt.Sprint(row.Batch),
			fmt.Sprintf("%.2f", row.Median), fmt.Sprintf("%.2f–%.2f", row.Min, row.Max)}
		if r.roof != nil {
			rate := fmt.Sprintf("%.1f GB/s", row.GBs)
			switch {
			case row.TFLOPs > 0 && onCPU:
				rate = fmt.Sprintf("%.1f GFLOP/s", row.TFLOPs*1e3)
			case row.TFLOPs > 0:
				rate = fmt.Sprintf("%.1f TFLOP/s", row.TFLOPs)
			}
			line = append(line, rate, fmt.Sprintf("%.1f", 100*row.Roofline))
		}
		table = append(table, line)
	}
	if onCPU {
		c := r.roof.CPU
		fmt.Fprintf(w, "roofline: %s, %d threads, %s products: copy %.1f GB/s (%d MiB, read+write, median of %d); FMA %.0f GFLOP/s (%s); int8 multiply-add %.0f GOP/s (%s); weights read per decode step %.3f GB%s\n\n",
			c.Model, c.Threads, r.products, c.CopyBW/1e9, c.CopyBytes>>20, cpuPeakReps, c.FMAFLOPs/1e9, c.FMAUnit, c.Int8Ops/1e9, c.Kernels, float64(cost.DecodeBytes)/1e9, cost.expertNote(1))
	} else if r.roof != nil {
		fmt.Fprintf(w, "roofline: %s (%s): copy %.0f GB/s (cuMemcpyDtoD %d GiB, read+write, median of %d); bf16 product %.1f TFLOP/s (%s, %d×%d×%d, median of %d); weights read per decode step %.3f GB%s\n\n",
			r.roof.Card, r.roof.Driver, r.roof.CopyBW/1e9, r.roof.CopyBytes>>30, rooflineReps, r.roof.MatmulTFLOPs, r.roof.MatmulKernel,
			r.roof.MatmulDims[0], r.roof.MatmulDims[1], r.roof.MatmulDims[2], rooflineReps, float64(cost.DecodeBytes)/1e9, cost.expertNote(1))
		if r.roof.OwnKernel != "" {
			fmt.Fprintf(w, "roofline: memra's own bf16 product at the same size: %.1f TFLOP/s (%s)\n\n", r.roof.OwnTFLOPs, r.roof.OwnKernel)
		}
	}
	if err := writeMarkdownTable(w, table); err != nil {
		return err
	}
	if r.opts.perfRows {
		fmt.Fprintln(w)
		for _, line := range r.perfRows(rows, cost) {
			fmt.Fprintln(w, line)
		}
	}
	if r.opts.jsonPath != "" {
		doc := struct {
			Model    string     `json:"model"`
			Quant    string     `json:"quant"`
			Device   string     `json:"device"`
			Products string     `json:"products,omitempty"`
			Untuned  bool       `json:"untuned"`
			Cost     modelCost  `json:"cost"`
			Roofline *roofline  `json:"roofline,omitempty"`
			Rows     []benchRow `json:"rows"`
		}{name, r.model.FileType, r.info.Device, r.products, r.opts.untuned, cost, r.roof, rows}
		data, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(r.opts.jsonPath, append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	if r.opts.plotPath != "" {
		var s plot.Series
		s.Name = "decode"
		for _, row := range rows {
			if strings.HasPrefix(row.Test, "tg") {
				s.X, s.Y = append(s.X, float64(row.Batch)), append(s.Y, row.Median)
			}
		}
		if len(s.X) == 0 {
			return fmt.Errorf("bench: --plot needs a tg test (-n > 0)")
		}
		svg := plot.Line([]plot.Series{s}, plot.Options{Title: name + " decode on " + r.info.Device, XLabel: "batch size",
			YLabel: "tokens/s (all sequences)", XScale: plot.Log2, XTicks: s.X})
		if err := os.WriteFile(r.opts.plotPath, svg, 0o644); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	return nil
}

// vcsRevision is the commit the binary was built from, "unknown" without
// VCS stamping.
func vcsRevision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	rev = rev[:min(len(rev), 12)]
	if dirty {
		rev += "+dirty"
	}
	return rev
}

// perfRows renders one docs/PERFORMANCE.md row per result.
func (r *benchReport) perfRows(rows []benchRow, cost modelCost) []string {
	card := r.info.Device
	switch {
	case r.roof != nil && r.roof.CPU != nil:
		c := r.roof.CPU
		card = fmt.Sprintf("CPU: %s, %d threads, %s products (%s)", c.Model, c.Threads, r.products, c.Kernels)
	case r.roof != nil:
		card = fmt.Sprintf("%s (%s)", r.roof.Card, r.roof.Driver)
	}
	fileBytes := cost.FileBytes
	if st, err := os.Stat(r.model.Path); err == nil && !st.IsDir() {
		fileBytes = st.Size()
	}
	preset := r.model.HParams.Name
	if preset == "" {
		preset = r.model.HParams.Arch
	}
	quant := r.model.FileType
	if quant == "" {
		quant = "?"
	}
	var out []string
	for _, row := range rows {
		roof := "–"
		if r.roof != nil {
			roof = fmt.Sprintf("%.1f %%", 100*row.Roofline)
		}
		var notes []string
		if r.roof != nil && r.roof.CPU != nil {
			c := r.roof.CPU
			if row.TFLOPs > 0 {
				notes = append(notes, fmt.Sprintf("%.1f GFLOP/s of %.0f FMA peak (%s), int8 peak %.0f GOP/s (%s)", row.TFLOPs*1e3, c.FMAFLOPs/1e9, c.FMAUnit, c.Int8Ops/1e9, c.Kernels))
			} else {
				notes = append(notes, fmt.Sprintf("%.1f GB/s weights of %.1f GB/s copy; %.3f GB/step%s", row.GBs, c.CopyBW/1e9, cost.stepBytes(row.Batch)/1e9, cost.expertNote(row.Batch)))
			}
		} else if r.roof != nil {
			if row.TFLOPs > 0 {
				note := fmt.Sprintf("%.1f TFLOP/s of %.1f (%s %d³", row.TFLOPs, r.roof.MatmulTFLOPs, r.roof.MatmulKernel, r.roof.MatmulDims[0])
				if r.roof.OwnKernel != "" {
					note += fmt.Sprintf("; %s %.1f", r.roof.OwnKernel, r.roof.OwnTFLOPs)
				}
				notes = append(notes, note+")")
			} else {
				notes = append(notes, fmt.Sprintf("%.0f GB/s weights of %.0f GB/s copy; %.3f GB/step%s", row.GBs, r.roof.CopyBW/1e9, cost.stepBytes(row.Batch)/1e9, cost.expertNote(row.Batch)))
			}
		}
		if r.opts.untuned {
			notes = append(notes, "untuned (family default arms)")
		} else if strings.HasPrefix(r.info.Device, "cuda") {
			notes = append(notes, "tunedb arms")
		}
		out = append(out, fmt.Sprintf("| %s | %s | %s | %s, %s, %d | %s | %d | %d | %.2f | %.2f–%.2f | %s | %s |",
			time.Now().UTC().Format("2006-01-02"), vcsRevision(), card, preset, quant, fileBytes, row.Test, row.Batch, row.N,
			row.Median, row.Min, row.Max, roof, strings.Join(notes, "; ")))
	}
	return out
}

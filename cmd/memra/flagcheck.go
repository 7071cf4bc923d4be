package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/memra-ai/memra/runtime"
)

// flagLimit is the range of values a numeric flag honours; a value outside
// it is refused with an error naming the flag, rather than silently
// becoming a default.
type flagLimit struct {
	min, max int64  // integers: at least min, at most max (when max > 0)
	positive bool   // durations: more than zero (else at least zero)
	note     string // what the edge values mean, for the error
}

func atLeast(n int64, note string) flagLimit { return flagLimit{min: n, note: note} }

var (
	anyThreads = atLeast(0, "0: all cores")
	ppLimits   = map[string]flagLimit{"pp-stages": atLeast(0, "0 or 1: off"), "pp-split": atLeast(0, "0: balance")}
)

// Every integer and duration flag of serve, run, bench and bench serve,
// with the values it honours (TestFlagLimitsCoverFlags keeps the tables
// complete).
var (
	serveLimits = withSpec(withPP(map[string]flagLimit{
		"port":             {min: 0, max: math.MaxUint16, note: "0: a free port"},
		"metrics-port":     {min: 0, max: math.MaxUint16, note: "0: off"},
		"max-running":      atLeast(1, ""),
		"max-queue":        atLeast(0, "0: no queue, requests beyond --max-running get 429"),
		"max-batch-tokens": atLeast(1, ""),
		"prefill-chunk":    atLeast(1, ""),
		"threads":          anyThreads,
		"max-body":         atLeast(1, ""),
		"max-conns":        atLeast(1, ""),
		"drain-timeout":    {note: "0: cancel running requests at once"},
		"retry-after":      {positive: true},
		"read-timeout":     {positive: true},
		"idle-timeout":     {positive: true},
		"context":          atLeast(0, "0: the model's"),
	}))
	runLimits = withSpec(withPP(map[string]flagLimit{
		"max-tokens":    atLeast(0, "0: until end of text or a full context"),
		"top-k":         atLeast(0, "0: off"),
		"repeat-last-n": atLeast(0, "0: all tokens"),
		"seed":          atLeast(-1, "-1: a random seed"),
		"threads":       anyThreads,
		"context":       atLeast(0, "0: the model's"),
	}))
	benchLimits = withSpec(withPP(map[string]flagLimit{
		"n-prompt":        atLeast(0, "0: skip pp"),
		"n-gen":           atLeast(0, "0: skip tg"),
		"context":         atLeast(0, "0: prompt + generated tokens"),
		"repetitions":     atLeast(1, ""),
		"threads":         anyThreads,
		"profile-prefill": atLeast(0, "0: a decode step alone"),
		"verify":          {min: 0, max: runtime.MaxSpecDraft, note: "0: off"},
	}))
	benchServeLimits = map[string]flagLimit{
		"concurrency":    atLeast(1, ""),
		"requests":       atLeast(0, "0: no count limit"),
		"prompt-tokens":  atLeast(0, "0: 512, or --prefix-tokens + 128 with --scenario shared-prefix"),
		"prefixes":       atLeast(1, ""),
		"prefix-tokens":  atLeast(1, ""),
		"turns":          atLeast(1, ""),
		"history-tokens": atLeast(1, ""),
		"max-tokens":     atLeast(1, ""),
		"warmup":         atLeast(0, ""),
		"duration":       {note: "0: no time limit"},
		"timeout":        {positive: true},
		"max-backoff":    {},
	}
)

func withSpec(m map[string]flagLimit) map[string]flagLimit {
	for k, v := range specLimits {
		m[k] = v
	}
	return m
}

func withPP(m map[string]flagLimit) map[string]flagLimit {
	for k, v := range ppLimits {
		m[k] = v
	}
	return m
}

// checkFlagLimits refuses a flag of cmd (set on the command line, in the
// environment or in the config file) whose value its limit does not honour.
func checkFlagLimits(cmd *cobra.Command, limits map[string]flagLimit) error {
	var first error
	cmd.Flags().VisitAll(func(fl *pflag.Flag) {
		lim, ok := limits[fl.Name]
		if !ok || first != nil {
			return
		}
		if err := lim.check(cmd.Flags(), fl); err != nil {
			first = fmt.Errorf("--%s %s: %w", fl.Name, strings.Trim(fl.Value.String(), "[]"), err)
		}
	})
	return first
}

// check checks the value of fl, an integer, integer list or duration flag.
func (l flagLimit) check(f *pflag.FlagSet, fl *pflag.Flag) error {
	switch fl.Value.Type() {
	case "duration":
		d, err := f.GetDuration(fl.Name)
		if err != nil {
			return err
		}
		return l.checkDuration(d)
	case "intSlice":
		vs, err := f.GetIntSlice(fl.Name)
		for _, v := range vs {
			if err == nil {
				err = l.checkInt(int64(v))
			}
		}
		return err
	case "int", "int64":
		v, err := strconv.ParseInt(fl.Value.String(), 10, 64)
		if err != nil {
			return err
		}
		return l.checkInt(v)
	}
	panic("BUG: a limit for --" + fl.Name + ", a flag of type " + fl.Value.Type())
}

func (l flagLimit) checkInt(v int64) error {
	switch {
	case l.max > 0 && (v < l.min || v > l.max):
		return l.refuse("must be between %d and %d", l.min, l.max)
	case v < l.min:
		return l.refuse("must be at least %d", l.min)
	}
	return nil
}

func (l flagLimit) checkDuration(d time.Duration) error {
	switch {
	case l.positive && d <= 0:
		return l.refuse("must be more than 0")
	case d < 0:
		return l.refuse("must not be negative")
	}
	return nil
}

func (l flagLimit) refuse(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if l.note != "" {
		msg += " (" + l.note + ")"
	}
	return errors.New(msg)
}

// engineQueue is the engine's MaxQueue for --max-queue: 0 means no queue
// (runtime.NoQueue), where the engine's own zero means its default.
func engineQueue(maxQueue int) int {
	if maxQueue == 0 {
		return runtime.NoQueue
	}
	return maxQueue
}

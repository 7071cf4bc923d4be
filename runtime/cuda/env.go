package cuda

import (
	"fmt"
	"os"
)

// envOptions applies the environment's configuration and diagnostics (the
// kernel choices are tunedb arms, docs/AUTOTUNE.md): MEMRA_KV_CACHE=
// f16|bf16|f32|q8_0 (the KV cache element type, when the caller chose
// none) and MEMRA_PDL=off (the diagnostic that launches without
// programmatic dependent launch). A value it cannot read is an error
// naming the variable, not a silent default. (MEMRA_DROP, a timing
// diagnostic, is read by newBackend.)
func envOptions(o *BackendOptions) error {
	if v := os.Getenv("MEMRA_KV_CACHE"); v != "" && o.Cache == "" {
		o.Cache = v
	}
	switch v := os.Getenv("MEMRA_PDL"); v {
	case "", "late":
	case "off":
		o.NoPDL = true
	default:
		return fmt.Errorf("%w: MEMRA_PDL=%q: want late or off", ErrArg, v)
	}
	return nil
}

// LoweringEnv lists the environment variables envOptions reads: those
// that change what a model lowers to or how it launches, recorded in a
// compiled artifact's manifest.
var LoweringEnv = []string{"MEMRA_KV_CACHE", "MEMRA_PDL"}

// LoweringEnvSet returns the LoweringEnv variables that are set, with their values.
func LoweringEnvSet() map[string]string {
	out := map[string]string{}
	for _, k := range LoweringEnv {
		if v, ok := os.LookupEnv(k); ok {
			out[k] = v
		}
	}
	return out
}

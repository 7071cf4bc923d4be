package serve

import (
	"github.com/memra-ai/memra/runtime"
)

// runtimeEngine adapts *runtime.Engine to Engine.
type runtimeEngine struct{ *runtime.Engine }

// FromRuntime wraps a runtime engine for the server.
func FromRuntime(e *runtime.Engine) Engine { return runtimeEngine{e} }

// Tokenizer implements Engine.
func (r runtimeEngine) Tokenizer() Tokenizer { return r.Engine.Tokenizer() }

// Stats implements Engine.
func (r runtimeEngine) Stats() Stats {
	st := r.Engine.Stats()
	return Stats{Running: st.Running, Queued: st.Queued, KVTokensUsed: st.KVTokensUsed, KVTokensTotal: st.KVTokensTotal,
		KVPagesUsed: st.KVPagesUsed, KVPagesCached: st.KVPagesCached, KVPagesTotal: st.KVPagesTotal,
		CachedTokens: st.CachedTokens, PromptTokens: st.PromptTokens, Preemptions: st.Preemptions,
		DecodeSteps: st.DecodeSteps, PrefillSteps: st.PrefillSteps, BackendSeconds: st.BackendSeconds, HostSeconds: st.HostSeconds,
		PrefillSeconds: st.PrefillSeconds, DecodeRows: st.DecodeRows, PrefillRows: st.PrefillRows,
		FedSteps: st.FedSteps, DeviceSteps: st.DeviceSteps, DeviceInputSeconds: st.DeviceInputSeconds, DeviceStepSeconds: st.DeviceStepSeconds,
		SpecSteps: st.SpecSteps, SpecDrafted: st.SpecDrafted, SpecAccepted: st.SpecAccepted}
}

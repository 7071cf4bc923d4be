package runtime

import "github.com/memra-ai/memra/runtime/tokenizer"

// NewEngine starts the scheduler of one loaded model: b runs its steps, tok
// turns its tokens into text (nil: events carry tokens but no text, and no
// token ends generation by itself). The engine owns b: Close closes it.
func NewEngine(b Backend, tok *tokenizer.Tokenizer, cfg EngineConfig) *Engine {
	if tok == nil {
		return newEngine(b, nil, tok, cfg)
	}
	return newEngine(b, tokenizerVocab{tok}, tok, cfg)
}

// Tokenizer returns the model's tokenizer (nil when the engine has none).
func (e *Engine) Tokenizer() *tokenizer.Tokenizer {
	return e.tok
}

// tokenizerVocab adapts *tokenizer.Tokenizer to the engine's vocabulary.
type tokenizerVocab struct{ *tokenizer.Tokenizer }

func (v tokenizerVocab) newDecoder() textDecoder { return v.NewDecoder() }

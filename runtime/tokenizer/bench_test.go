package tokenizer

import (
	"math/rand"
	"strings"
	"testing"
)

// englishText makes n bytes of English-like prose: common words mixed with
// random syllable words (so the piece cache does not hide BPE), digits and
// punctuation.
func englishText(n int) string {
	common := strings.Fields("the of and to in is was that for it with as his on be at by had are but from " +
		"not have this which or were they one you all her she there would their we him been has when who will " +
		"more no if out so said what up its about into than them can only other new some could time these two")
	syl := []string{"ka", "ter", "min", "o", "la", "sen", "tru", "ph", "ing", "ed", "con", "ver", "ly", "tion", "qu", "ar"}
	r := rand.New(rand.NewSource(1))
	var sb strings.Builder
	for sb.Len() < n {
		switch x := r.Intn(100); {
		case x < 70:
			sb.WriteString(common[r.Intn(len(common))])
		case x < 95:
			for k := 1 + r.Intn(4); k > 0; k-- {
				sb.WriteString(syl[r.Intn(len(syl))])
			}
		default:
			sb.WriteString("1984")
		}
		switch x := r.Intn(30); {
		case x == 0:
			sb.WriteString(". ")
		case x == 1:
			sb.WriteString(", ")
		case x == 2:
			sb.WriteString("\n\n")
		default:
			sb.WriteByte(' ')
		}
	}
	return sb.String()[:n]
}

func benchEncode(b *testing.B, tok *Tokenizer) {
	text := englishText(1 << 20)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tok.Encode(text, false, false)
	}
}

func BenchmarkEncodeSPM(b *testing.B)    { benchEncode(b, ggufTok(b, "llama-spm")) }
func BenchmarkEncodeGPT2(b *testing.B)   { benchEncode(b, ggufTok(b, "gpt-2")) }
func BenchmarkEncodeLlama3(b *testing.B) { benchEncode(b, llama3(b)) }
func BenchmarkEncodeQwen2(b *testing.B)  { benchEncode(b, qwen(b)) }

package loadtest

import (
	"math/rand/v2"
	"strconv"
	"strings"
)

// words are common English words that most BPE and SentencePiece
// vocabularies hold as one token each (with their leading space), so a
// prompt of n words is roughly n tokens.
var words = strings.Fields(`the of and to in is was for on are with as at be this have from or
one had by but not what all were we when your can said there use each which she do how their if will
up other about out many then them these so some her would make like him into time has look two more
write go see number no way could people my than first water been call who oil its now find long down
day did get come made may part over new sound take only little work know place year live me back give
most very after thing our just name good sentence man think say great where help through much before
line right too mean old any same tell boy follow came want show also around form three small set put
end does another well large must big even such because turn here why ask went men read need land
different home us move try kind hand picture again change off play spell air away animal house point
page letter mother answer found study still learn should world high every near add food between own
below country plant last school father keep tree never start city earth eye light thought head under
story saw left few while along might close something seem next hard open example begin life always`)

// promptFor returns the synthetic prompt of request seq of a level: a random
// first word and number, so no two requests share a cached prefix, then
// words from a random offset until about n tokens.
func promptFor(seed uint64, level, seq, n int) string {
	rng := rand.New(rand.NewPCG(seed, uint64(level)<<32|uint64(uint32(seq))))
	var b strings.Builder
	b.Grow(n * 6)
	b.WriteString(words[rng.IntN(len(words))])
	b.WriteByte(' ')
	b.WriteString(strconv.Itoa(rng.IntN(1000)))
	off := rng.IntN(len(words))
	for i := 2; i < n; i++ {
		b.WriteByte(' ')
		b.WriteString(words[(off+i)%len(words)])
	}
	return b.String()
}

// Streams of the generated texts: each kind of text draws from its own
// random stream, so a shared prompt never repeats a user text.
const (
	streamPrefix uint64 = iota + 1
	streamSuffix
	streamConversation
)

// rngFor returns the random source of one generated text: the seed, the
// kind of text and two numbers that tell the texts of a kind apart.
func rngFor(seed, stream uint64, a, b int) *rand.Rand {
	return rand.New(rand.NewPCG(seed^stream*0x9e3779b97f4a7c15, uint64(a)<<32^uint64(uint32(b))))
}

// randomWords returns n words drawn independently from words, joined by
// spaces: n words are about n tokens, and two such texts share a prefix
// of k words with odds of 1 in len(words)^k.
func randomWords(rng *rand.Rand, n int) string {
	var b strings.Builder
	b.Grow(n * 6)
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[rng.IntN(len(words))])
	}
	return b.String()
}

// sharedPrefix returns shared system prompt i of SharedPrefix: n words,
// the same for every level and request of a seed.
func sharedPrefix(seed uint64, i, n int) string {
	return randomWords(rngFor(seed, streamPrefix, 0, i), n)
}

// suffixFor returns the user text of request seq of a level under
// SharedPrefix: n words of its own.
func suffixFor(seed uint64, level, seq, n int) string {
	return randomWords(rngFor(seed, streamSuffix, level, seq), n)
}

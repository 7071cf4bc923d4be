package builtin

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOpen(t *testing.T) {
	// The embedded file is the fixture named in testdata/PROVENANCE.md.
	sum := sha256.Sum256(Bytes())
	require.Equal(t, "c14806920629b6c217445c69d7ac61bd0e4047289f8ab824c3f0b4f827a5d1cb", hex.EncodeToString(sum[:]))

	m, err := Open()
	require.NoError(t, err)
	defer m.Close()
	require.Equal(t, "llama", m.HParams.Arch)
	require.Equal(t, 64, m.HParams.Embedding)
	require.Equal(t, 512, m.HParams.VocabSize)
	require.NotNil(t, m.Tokenizer)
	require.Equal(t, int32(1), m.Tokenizer.BOS())
	emb, ok := m.Tensors["token_embd.weight"]
	require.True(t, ok)
	require.Equal(t, []int{64, 512}, emb.Shape)
	data, err := emb.Data()
	require.NoError(t, err)
	require.Len(t, data, 64*512*4)
}

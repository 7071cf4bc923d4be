package tokenizer

import (
	"encoding/json"
	"fmt"
	"sort"
	"unicode/utf8"
)

type obj = map[string]any

// HFJSON writes the tokenizer as a Hugging Face tokenizer.json and
// tokenizer_config.json, so that a checkpoint folder made from a GGUF
// tokenizes the same way. SentencePiece vocabularies become BPE with byte
// fallback and merges ordered by score (FromHF turns the order back into
// scores); byte-level ones keep their merges (derived for tiktoken) and
// write their pre-tokenizer regexes as Split steps.
func (t *Tokenizer) HFJSON() (tokenizerJSON, configJSON []byte, err error) {
	v := t.Vocab()
	vocab := make(map[string]int32, len(v.Tokens))
	var added []obj
	for i, s := range v.Tokens {
		ty := t.types[i]
		if ty == TypeUnused {
			continue
		}
		if _, dup := vocab[s]; dup {
			continue
		}
		vocab[s] = int32(i)
		if ty == TypeControl || ty == TypeUserDefined || ty == TypeUnknown {
			at := t.opt.attrs[int32(i)]
			special := ty != TypeUserDefined
			added = append(added, obj{"id": i, "content": s, "single_word": false,
				"lstrip": at&attrLStrip != 0, "rstrip": at&attrRStrip != 0, "normalized": !special, "special": special})
		}
	}
	unk := any(nil)
	if v.UNK >= 0 && int(v.UNK) < len(v.Tokens) {
		unk = v.Tokens[v.UNK]
	}
	model := obj{"type": "BPE", "dropout": nil, "unk_token": unk, "continuing_subword_prefix": nil,
		"end_of_word_suffix": nil, "vocab": vocab}
	var normalizer, pre, decoder any
	if t.kind == kindSPM {
		model["fuse_unk"], model["byte_fallback"], model["ignore_merges"] = true, true, false
		model["merges"] = t.spmMerges()
		replace := obj{"type": "Replace", "pattern": obj{"String": " "}, "content": "\u2581"}
		if t.addSpacePrefix {
			normalizer = obj{"type": "Sequence", "normalizers": []any{obj{"type": "Prepend", "prepend": "\u2581"}, replace}}
		} else {
			normalizer = replace
		}
		decoders := []any{
			obj{"type": "Replace", "pattern": obj{"String": "\u2581"}, "content": " "},
			obj{"type": "ByteFallback"}, obj{"type": "Fuse"},
		}
		if t.stripSpace {
			decoders = append(decoders, obj{"type": "Strip", "content": " ", "start": 1, "stop": 0})
		}
		decoder = obj{"type": "Sequence", "decoders": decoders}
	} else {
		model["fuse_unk"], model["byte_fallback"], model["ignore_merges"] = false, false, t.bpe.ignoreMerges
		pairs := make([][2]string, 0, len(v.Merges))
		for _, m := range v.Merges {
			l, r, ok := splitMerge(m)
			if !ok {
				return nil, nil, fmt.Errorf("%w: merge %q", ErrInvalid, m)
			}
			pairs = append(pairs, [2]string{l, r})
		}
		model["merges"] = pairs
		if t.opt.normJSON != nil {
			normalizer = json.RawMessage(t.opt.normJSON)
		}
		var steps []any
		for _, p := range t.pre.patterns {
			steps = append(steps, obj{"type": "Split", "pattern": obj{"Regex": p}, "behavior": "Isolated", "invert": false})
		}
		steps = append(steps, obj{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false})
		pre = obj{"type": "Sequence", "pretokenizers": steps}
		decoder = obj{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}
	}
	doc := obj{"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": added,
		"normalizer": normalizer, "pre_tokenizer": pre, "post_processor": t.template(), "decoder": decoder, "model": model}
	if tokenizerJSON, err = json.Marshal(doc); err != nil {
		return nil, nil, fmt.Errorf("%w: tokenizer.json: %v", ErrInvalid, err)
	}
	name := func(id int32) any {
		if id >= 0 && int(id) < len(v.Tokens) {
			return v.Tokens[id]
		}
		return nil
	}
	cfg := obj{"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": t.addBOS, "add_eos_token": t.addEOS,
		"bos_token": name(t.bos), "eos_token": name(t.eos), "unk_token": unk, "pad_token": name(v.PAD),
		"clean_up_tokenization_spaces": t.clean}
	if t.kind == kindSPM {
		cfg["legacy"] = true
	}
	if configJSON, err = json.MarshalIndent(cfg, "", "  "); err != nil {
		return nil, nil, fmt.Errorf("%w: tokenizer_config.json: %v", ErrInvalid, err)
	}
	return tokenizerJSON, configJSON, nil
}

// template is the TemplateProcessing post-processor adding BOS/EOS, or nil.
func (t *Tokenizer) template() any {
	var single, pair []any
	specials := obj{}
	item := func(id int32) any {
		s := t.v.Tokens[id]
		specials[s] = obj{"id": s, "ids": []int32{id}, "tokens": []string{s}}
		return obj{"SpecialToken": obj{"id": s, "type_id": 0}}
	}
	for _, seq := range []string{"A", "B"} {
		typeID := 0
		if seq == "B" {
			typeID = 1
		}
		var items []any
		if t.addBOS && t.bos >= 0 {
			items = append(items, item(t.bos))
		}
		items = append(items, obj{"Sequence": obj{"id": seq, "type_id": typeID}})
		if t.addEOS && t.eos >= 0 {
			items = append(items, item(t.eos))
		}
		if seq == "A" {
			single = items
		}
		pair = append(pair, items...)
	}
	if len(specials) == 0 {
		return nil
	}
	return obj{"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": specials}
}

// spmMerges lists, for every normal multi-character token, each split into
// two tokens, highest token score first (ties by token id, then by the ids
// of the parts): the merge list of the equivalent BPE.
func (t *Tokenizer) spmMerges() [][2]string {
	type merge struct {
		score  float32
		id     int32
		li, ri int32
	}
	var ms []merge
	for i, s := range t.v.Tokens {
		if t.types[i] != TypeNormal || utf8.RuneCountInString(s) < 2 {
			continue
		}
		var score float32
		if t.scores != nil {
			score = t.scores[i]
		}
		for j, r := range s {
			if j == 0 {
				continue
			}
			_ = r
			li, ok1 := t.ids[s[:j]]
			ri, ok2 := t.ids[s[j:]]
			if ok1 && ok2 && t.types[li] == TypeNormal && t.types[ri] == TypeNormal {
				ms = append(ms, merge{score, int32(i), li, ri})
			}
		}
	}
	sort.SliceStable(ms, func(a, b int) bool {
		x, y := ms[a], ms[b]
		if x.score != y.score {
			return x.score > y.score
		}
		if x.id != y.id {
			return x.id < y.id
		}
		if x.li != y.li {
			return x.li < y.li
		}
		return x.ri < y.ri
	})
	out := make([][2]string, len(ms))
	for i, m := range ms {
		out[i] = [2]string{t.v.Tokens[m.li], t.v.Tokens[m.ri]}
	}
	return out
}

// Package chat renders chat templates: the Jinja templates that Hugging Face models ship in
// tokenizer_config.json (and GGUF files in tokenizer.chat_template) to turn a list of messages
// into the prompt text the model was trained on.
//
// Templates run on github.com/nikolalohinski/gonja/v2, configured the way Hugging Face
// transformers configures Python's jinja2, so that a template renders byte for byte what
// transformers' apply_chat_template would:
//
//   - trim_blocks and lstrip_blocks are on;
//   - tojson is Python's json.dumps (", " and ": " separators, indent, raw UTF-8 since
//     transformers passes ensure_ascii=False, no HTML escaping, key insertion order kept);
//   - raise_exception(msg) fails the render with msg (ErrRaised), and strftime_now(fmt)
//     formats the current time with Python's strftime directives;
//   - JSON objects in the context keep their key order, so dict.items()/keys()/values() and
//     |items iterate in insertion order;
//   - only what the context provides is defined: messages, tools, add_generation_prompt,
//     bos_token, eos_token and any extra keyword (enable_thinking, …) come from the JSON object
//     passed to Render.
//
// gonja differs from jinja2 in a few places that real templates hit. Compile works around them
// with two documented rewrites, both tested:
//
//  1. Source rewrite (rewrite.go), before parsing: gonja parses a conditional expression
//     "A if C else B" only as a whole {{ … }} or {% set %} value. Inside parentheses,
//     brackets or call arguments (Gemma 3: `(first_user_prefix if loop.first else "")`)
//     it is a parse error. Such an element is rewritten to `((C) and [A] or [B])[0]`,
//     which gonja parses and which has the same value and laziness.
//  2. Tree rewrite (tree.go), after parsing: operations whose gonja semantics differ from
//     Python's are replaced by filters with Python semantics:
//     x[i] (gonja returns None for x[-n] when n == len(x) and indexes strings by byte),
//     a + b (gonja silently stringifies "str" + list or None where Python raises TypeError),
//     a in b (gonja returns False where Python raises TypeError, e.g. "x" in None), and
//     {{ v }} (gonja prints "" for None and Go-style lists; jinja2 prints str(v)).
//
// Also replaced: |trim and |string (str() of non-strings), the true/false/defined tests,
// dict methods (ordered), and range(), which is a list capped at 100000 numbers as in
// jinja2's sandbox. {% include %}, {% import %} and {% extends %} cannot load anything.
//
// The Fallback template is used for models that ship no chat template. It renders ChatML
// (<|im_start|>role\ncontent<|im_end|>\n per message, and <|im_start|>assistant\n as the
// generation prompt), the format most instruction-tuned open models and llama.cpp use by
// default. Multi-part content ([{"type":"text","text":…}, …]) renders as its text parts
// joined with "\n"; other parts (images, audio) are left out.
//
// A compiled Template is immutable: Render may be called from many goroutines at once.
package chat

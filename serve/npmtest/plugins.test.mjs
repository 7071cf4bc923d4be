// WebAssembly plugins through the official openai client, against a
// `memra serve` started by run.sh with
//   --template-plugin stories260K=testplugin.wasm   (testdata/testplugin)
//   --grammar-plugin test=testplugin.wasm
//   --grammar-plugin regex=bin/plugins/regex.wasm  (the example, `make plugins`)
// The test plugin's template renders "PLUGIN[ROLE=CONTENT|…]" upper-cased,
// which no built-in template would; its grammars write digits, and "trap"
// and "loop" fail after 3 digits.
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

const pluginURL = process.env.MEMRA_PLUGIN_URL;
const plainURL = process.env.MEMRA_URL;
if (!pluginURL || !plainURL) {
  throw new Error("run through serve/npmtest/run.sh (MEMRA_PLUGIN_URL, MEMRA_URL)");
}
const client = new OpenAI({ baseURL: pluginURL, apiKey: "unused", maxRetries: 0 });
const plain = new OpenAI({ baseURL: plainURL, apiKey: "unused", maxRetries: 0 });
const model = "stories260K";

// What the test plugin renders for messages.
const pluginRender = (messages) =>
  "PLUGIN[" + messages.map((m) => `${m.role}=${m.content}`.toUpperCase()).join("|") + "]";

test("template plugin renders the chat prompt", async () => {
  const messages = [
    { role: "system", content: "Be brief." },
    { role: "user", content: "Once upon a time" },
  ];
  const params = { model, messages, max_tokens: 12, temperature: 0, ignore_eos: true };
  const chat = await client.chat.completions.create(params);
  // The same text as a raw prompt: same tokens (BOS + the rendering), so the
  // same prompt_tokens and the same greedy continuation.
  const raw = await client.completions.create({
    model, prompt: pluginRender(messages), max_tokens: 12, temperature: 0, ignore_eos: true,
  });
  assert.equal(chat.usage.prompt_tokens, raw.usage.prompt_tokens);
  assert.equal(chat.choices[0].message.content, raw.choices[0].text);
  assert.equal(chat.usage.completion_tokens, 12);
  // The built-in template (the server without plugins) renders another prompt.
  const builtin = await plain.chat.completions.create({ ...params, model });
  assert.notEqual(builtin.usage.prompt_tokens, chat.usage.prompt_tokens);
});

test("template plugin: streamed chat equals blocking", async () => {
  const params = { model, messages: [{ role: "user", content: "Tom had a" }], max_tokens: 10, temperature: 0 };
  const blocking = await client.chat.completions.create(params);
  const stream = await client.chat.completions.create({ ...params, stream: true });
  let text = "";
  for await (const c of stream) text += c.choices[0]?.delta?.content ?? "";
  assert.equal(text, blocking.choices[0].message.content);
});

test("regex grammar plugin: every output matches at temperature 1", async () => {
  const source = "(the|a) (cat|dog|bird)( (ran|sat|sang))?( and (the|a) (cat|dog|bird)){0,2}\\.";
  const re = new RegExp("^(?:" + source + ")$");
  const texts = new Set();
  for (let seed = 1; seed <= 8; seed++) {
    const r = await client.completions.create({
      model, prompt: "Once upon a time", temperature: 1, seed, max_tokens: 64, grammar: { plugin: "regex", source },
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, "stop", `seed ${seed}: ${JSON.stringify(c.text)}`);
    assert.match(c.text, re, `seed ${seed}`);
    texts.add(c.text);
  }
  assert.ok(texts.size > 1, "sampling at temperature 1 gives more than one output");

  // Chat, streamed, with n = 3: every choice matches too.
  const stream = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "A pet?" }], temperature: 1, seed: 11, n: 3, max_tokens: 64,
    stream: true, grammar: { plugin: "regex", source },
  });
  const out = ["", "", ""];
  const finish = [];
  for await (const c of stream) {
    for (const ch of c.choices) {
      out[ch.index] += ch.delta?.content ?? "";
      if (ch.finish_reason) finish[ch.index] = ch.finish_reason;
    }
  }
  assert.deepEqual(finish, ["stop", "stop", "stop"]);
  for (const t of out) assert.match(t, re);
});

test("grammar plugin errors are 400s naming grammar", async () => {
  const cases = [
    [{ plugin: "nope", source: "x" }, /unknown grammar plugin.*regex, test/],
    [{ plugin: "regex", source: "(x" }, /missing closing \)/],
    [{ plugin: "regex", src: "x" }, /bad grammar request/],
    [{ source: "x" }, /"plugin" is required/],
    [{ plugin: "test", source: "letters" }, /unknown grammar "letters"/],
  ];
  for (const [grammar, want] of cases) {
    await assert.rejects(
      client.completions.create({ model, prompt: "x", max_tokens: 4, grammar }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === "grammar" && want.test(e.message),
      JSON.stringify(grammar),
    );
  }
  // A GBNF string still works beside plugins.
  const r = await client.completions.create({
    model, prompt: "x", temperature: 1, seed: 3, max_tokens: 20, grammar: 'root ::= "yes" | "no"',
  });
  assert.match(r.choices[0].text, /^(yes|no)$/);
});

test("grammar plugin that traps or times out mid-generation: a clear error, the server stays healthy", async () => {
  for (const [source, want] of [["trap", /trapped.*trap after 3 digits/s], ["loop", /past its deadline/]]) {
    await assert.rejects(
      client.completions.create({ model, prompt: "1", temperature: 1, seed: 1, max_tokens: 30, grammar: { plugin: "test", source } }),
      (e) => e instanceof OpenAI.InternalServerError && e.status === 500 && /grammar plugin failed/.test(e.message) &&
        want.test(e.message),
      source,
    );
    // Streamed: the digits come, then an error event ends the stream.
    const stream = await client.completions.create({
      model, prompt: "1", temperature: 1, seed: 2, max_tokens: 30, stream: true, grammar: { plugin: "test", source },
    });
    let text = "";
    await assert.rejects(
      (async () => {
        for await (const c of stream) text += c.choices[0]?.text ?? "";
      })(),
      (e) => /grammar plugin failed/.test(e.message) && want.test(e.message),
    );
    assert.match(text, /^[0-9]{3,}$/);
  }
  // Healthy afterwards: the same plugin's good grammar, and plain requests.
  const ok = await client.completions.create({
    model, prompt: "1", temperature: 1, seed: 4, max_tokens: 8, grammar: { plugin: "test", source: "digits" },
  });
  assert.match(ok.choices[0].text, /^[0-9]+$/);
  const chat = await client.chat.completions.create({ model, messages: [{ role: "user", content: "Hi" }], max_tokens: 4 });
  assert.ok(chat.usage.completion_tokens > 0);
  const health = await fetch(new URL("../health", pluginURL + "/"));
  assert.equal(health.status, 200);
});

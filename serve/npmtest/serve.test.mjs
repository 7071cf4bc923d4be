// The official openai client against `memra serve` (started by run.sh).
import { test, before } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

const baseURL = process.env.MEMRA_URL;
const keyedURL = process.env.MEMRA_KEYED_URL;
const key = process.env.MEMRA_KEY;
if (!baseURL || !keyedURL || !key) {
  throw new Error("run through serve/npmtest/run.sh (MEMRA_URL, MEMRA_KEYED_URL, MEMRA_KEY)");
}

const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0 });
let model;

before(async () => {
  const list = await client.models.list();
  assert.ok(list.data.length >= 1);
  model = list.data[0].id;
});

const user = (content) => [{ role: "user", content }];

test("models: list and retrieve", async () => {
  const list = await client.models.list();
  const m = list.data[0];
  assert.equal(m.object, "model");
  assert.equal(typeof m.created, "number");
  assert.equal(m.owned_by, "memra");
  assert.ok(m.context_length > 0);
  assert.ok(m.supported_parameters.includes("logprobs"));
  const one = await client.models.retrieve(model);
  assert.equal(one.id, model);
});

test("chat: blocking", async () => {
  const r = await client.chat.completions.create({
    model, messages: user("Tell me a story."), max_tokens: 12, temperature: 0,
  });
  assert.equal(r.object, "chat.completion");
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, "assistant");
  assert.ok(r.choices[0].message.content.length > 0);
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(r.usage.completion_tokens <= 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test("chat: max_tokens is exact", async () => {
  const r = await client.chat.completions.create({
    model, messages: user("Once"), max_tokens: 5, temperature: 0, ignore_eos: true,
  });
  assert.equal(r.usage.completion_tokens, 5);
  assert.equal(r.choices[0].finish_reason, "length");
});

test("chat: streaming equals blocking, with include_usage", async () => {
  const params = { model, messages: user("Tell me a story."), max_tokens: 16, temperature: 0 };
  const blocking = await client.chat.completions.create(params);
  const stream = await client.chat.completions.create({
    ...params, stream: true, stream_options: { include_usage: true },
  });
  let text = "", role = null, finish = null, usage = null, chunks = 0;
  for await (const c of stream) {
    chunks++;
    assert.equal(c.object, "chat.completion.chunk");
    if (c.choices.length === 0) {
      usage = c.usage;
      continue;
    }
    const d = c.choices[0].delta;
    if (d.role) role = d.role;
    if (d.content) text += d.content;
    if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
  }
  assert.ok(chunks > 2);
  assert.equal(role, "assistant");
  assert.equal(text, blocking.choices[0].message.content);
  assert.equal(finish, blocking.choices[0].finish_reason);
  assert.deepEqual(usage, blocking.usage);
});

test("chat: stop string ends the text before it", async () => {
  const free = await client.chat.completions.create({
    model, messages: user("Tell me a story."), max_tokens: 30, temperature: 0,
  });
  const text = free.choices[0].message.content;
  assert.ok(text.length > 6, text);
  const stop = text.slice(4, 7);
  const r = await client.chat.completions.create({
    model, messages: user("Tell me a story."), max_tokens: 30, temperature: 0, stop: [stop],
  });
  assert.equal(r.choices[0].message.content, text.slice(0, text.indexOf(stop)));
  assert.equal(r.choices[0].finish_reason, "stop");
});

test("chat: n > 1 streamed interleaved", async () => {
  const stream = await client.chat.completions.create({
    model, messages: user("Hi"), max_tokens: 6, temperature: 1, seed: 7, n: 3, stream: true,
  });
  const texts = ["", "", ""], finished = [false, false, false];
  for await (const c of stream) {
    for (const ch of c.choices) {
      texts[ch.index] += ch.delta.content ?? "";
      if (ch.finish_reason) finished[ch.index] = true;
    }
  }
  assert.deepEqual(finished, [true, true, true]);
  for (const t of texts) assert.ok(t.length > 0);
});

test("chat: logprobs", async () => {
  const r = await client.chat.completions.create({
    model, messages: user("Hi"), max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 3,
  });
  const lp = r.choices[0].logprobs.content;
  assert.ok(lp.length > 0 && lp.length <= 4);
  for (const t of lp) {
    assert.equal(typeof t.token, "string");
    assert.ok(t.logprob <= 0);
    assert.ok(Array.isArray(t.bytes));
    assert.equal(t.top_logprobs.length, 3);
    // Greedy: the chosen token is the most likely one.
    assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob);
    assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4);
  }
});

test("chat: same seed at temperature 1 gives the same text", async () => {
  const p = { model, messages: user("Tell me a story."), max_tokens: 20, temperature: 1, seed: 1234 };
  const a = await client.chat.completions.create(p);
  const b = await client.chat.completions.create(p);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
});

test("completions: blocking, string and token prompts", async () => {
  const r = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 8, temperature: 0 });
  assert.equal(r.object, "text_completion");
  assert.match(r.id, /^cmpl-/);
  assert.ok(r.choices[0].text.length > 0);
  const many = await client.completions.create({
    model, prompt: ["Once upon a time", "The cat"], max_tokens: 4, temperature: 0,
  });
  assert.equal(many.choices.length, 2);
  assert.deepEqual(many.choices.map((c) => c.index), [0, 1]);
  assert.equal(many.choices[0].text, r.choices[0].text.slice(0, many.choices[0].text.length));
  const ids = await client.completions.create({ model, prompt: [1, 400, 261], max_tokens: 4, temperature: 0 });
  assert.equal(ids.usage.prompt_tokens, 3);
});

test("completions: streaming with include_usage and logprobs", async () => {
  const p = { model, prompt: "Once upon a time", max_tokens: 10, temperature: 0, logprobs: 2 };
  const blocking = await client.completions.create(p);
  const stream = await client.completions.create({ ...p, stream: true, stream_options: { include_usage: true } });
  let text = "", tokens = [], usage = null, finish = null;
  for await (const c of stream) {
    assert.equal(c.object, "text_completion");
    if (c.choices.length === 0) {
      usage = c.usage;
      continue;
    }
    text += c.choices[0].text;
    if (c.choices[0].logprobs) tokens.push(...c.choices[0].logprobs.tokens);
    if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
  }
  assert.equal(text, blocking.choices[0].text);
  assert.deepEqual(tokens, blocking.choices[0].logprobs.tokens);
  assert.equal(blocking.choices[0].logprobs.top_logprobs.length, tokens.length);
  assert.equal(finish, blocking.choices[0].finish_reason);
  assert.deepEqual(usage, blocking.usage);
});

test("errors: 400 BadRequestError", async () => {
  await assert.rejects(
    client.chat.completions.create({ model, messages: [], max_tokens: 4 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /messages/.test(e.message),
  );
  await assert.rejects(
    client.chat.completions.create({ model, messages: user("x"), max_tokens: -3 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "max_tokens",
  );
  await assert.rejects(
    client.completions.create({ model, prompt: "x", logit_bias: { nope: 5 } }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "logit_bias",
  );
});

test("errors: 404 NotFoundError for an unknown model", async () => {
  await assert.rejects(
    client.chat.completions.create({ model: "no-such-model", messages: user("x") }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === "model_not_found",
  );
});

test("errors: 401 AuthenticationError on a keyed server", async () => {
  const wrong = new OpenAI({ baseURL: keyedURL, apiKey: "sk-wrong", maxRetries: 0 });
  await assert.rejects(wrong.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  const right = new OpenAI({ baseURL: keyedURL, apiKey: key, maxRetries: 0 });
  const list = await right.models.list();
  assert.ok(list.data.length >= 1);
  const metrics = await fetch(keyedURL.replace(/\/v1$/, "/metrics"));
  assert.equal(metrics.status, 401);
});

// Embeddings, the Responses API and model metadata through the official
// openai client. "embed" is a one-layer Qwen3-shaped embedding model with
// random weights (memra synth --embedding last); "qwen3" is the agent
// model of agent.test.mjs, whose random weights need constrained decoding
// for a tool call; stories260K writes text.
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

const baseURL = process.env.MEMRA_URL;
const agent = process.env.MEMRA_AGENT_MODEL;
const embedModel = process.env.MEMRA_EMBED_MODEL;
if (!baseURL || !agent || !embedModel) {
  throw new Error("run through serve/npmtest/run.sh (MEMRA_URL, MEMRA_AGENT_MODEL, MEMRA_EMBED_MODEL)");
}
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0 });
const story = "stories260K";

const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

test("embeddings: the SDK's default (base64, decoded by the SDK) equals float", async () => {
  const input = ["The quick brown fox.", "A lazy dog sleeps."];
  const b64 = await client.embeddings.create({ model: embedModel, input });
  const flt = await client.embeddings.create({ model: embedModel, input, encoding_format: "float" });
  assert.equal(b64.object, "list");
  assert.equal(b64.model, embedModel);
  assert.equal(b64.data.length, 2);
  const width = (await client.models.retrieve(embedModel)).embedding_dimensions;
  assert.ok(width > 0);
  for (const [i, d] of b64.data.entries()) {
    assert.equal(d.object, "embedding");
    assert.equal(d.index, i);
    assert.equal(d.embedding.length, width);
    assert.ok(Math.abs(norm(d.embedding) - 1) < 1e-5, "unit length");
    // the same float32s: base64 carries their bits, JSON their shortest decimal form
    assert.deepEqual(d.embedding, flt.data[i].embedding.map(Math.fround));
  }
  assert.notDeepEqual(b64.data[0].embedding, b64.data[1].embedding);
  assert.ok(b64.usage.prompt_tokens > 0);
  assert.equal(b64.usage.total_tokens, b64.usage.prompt_tokens);
});

test("embeddings: one input alone equals it in a batch; dimensions truncate", async () => {
  const alone = await client.embeddings.create({ model: embedModel, input: "A lazy dog sleeps.", encoding_format: "float" });
  const batch = await client.embeddings.create({ model: embedModel, input: ["x", "A lazy dog sleeps."], encoding_format: "float" });
  const a = alone.data[0].embedding, b = batch.data[1].embedding;
  const cos = a.reduce((s, x, i) => s + x * b[i], 0);
  assert.ok(cos > 0.9999, `cosine ${cos}`);
  const short = await client.embeddings.create({ model: embedModel, input: "A lazy dog sleeps.", dimensions: 16 });
  assert.equal(short.data[0].embedding.length, 16);
  assert.ok(Math.abs(norm(short.data[0].embedding) - 1) < 1e-5);
});

test("embeddings: a model without a pooling is refused", async () => {
  await assert.rejects(client.embeddings.create({ model: story, input: "x" }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, "model");
    return true;
  });
});

test("responses: blocking", async () => {
  const r = await client.responses.create({
    model: story, input: "Tell me a story.", instructions: "Be kind.", max_output_tokens: 12, temperature: 0,
  });
  assert.equal(r.object, "response");
  assert.match(r.id, /^resp_/);
  assert.ok(["completed", "incomplete"].includes(r.status));
  assert.ok(r.output_text.length > 0, "the SDK's output_text");
  assert.equal(r.output[0].type, "message");
  assert.equal(r.output[0].content[0].type, "output_text");
  assert.ok(r.usage.input_tokens > 0);
  assert.ok(r.usage.output_tokens <= 12);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  assert.equal(r.store, false);
});

test("responses: streamed events join to the blocking text", async () => {
  const params = { model: story, input: "Tell me a story.", max_output_tokens: 16, temperature: 0 };
  const blocking = await client.responses.create(params);
  const stream = await client.responses.create({ ...params, stream: true });
  const types = [];
  let text = "", completed = null, seq = -1;
  for await (const ev of stream) {
    types.push(ev.type);
    assert.equal(ev.sequence_number, seq + 1);
    seq = ev.sequence_number;
    if (ev.type === "response.output_text.delta") text += ev.delta;
    if (ev.type === "response.completed") completed = ev.response;
  }
  assert.equal(types[0], "response.created");
  assert.equal(types.at(-1), "response.completed");
  for (const t of ["response.output_item.added", "response.content_part.added", "response.output_text.done", "response.output_item.done"]) {
    assert.ok(types.includes(t), t);
  }
  assert.equal(text, blocking.output_text);
  assert.equal(completed.output[0].content[0].text, text);
  assert.equal(completed.usage.output_tokens, blocking.usage.output_tokens);
});

const weather = {
  type: "function", name: "get_weather", description: "Current weather of a city",
  parameters: {
    type: "object",
    properties: { city: { type: "string", maxLength: 10 }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
    required: ["city", "unit"], additionalProperties: false,
  },
};

function checkArgs(text) {
  const args = JSON.parse(text);
  assert.equal(typeof args.city, "string");
  assert.ok(["celsius", "fahrenheit"].includes(args.unit));
}

test("responses: a tool call, blocking and streamed", async () => {
  const params = {
    model: agent, input: [{ role: "user", content: "Weather in Paris?" }], tools: [weather],
    tool_choice: "required", temperature: 1, max_output_tokens: 120,
  };
  const r = await client.responses.create(params);
  const call = r.output.find((o) => o.type === "function_call");
  assert.ok(call, JSON.stringify(r.output));
  assert.equal(call.name, "get_weather");
  assert.match(call.call_id, /^call_/);
  checkArgs(call.arguments);

  const stream = await client.responses.create({ ...params, stream: true });
  let args = "", done = null, added = null, final = null;
  for await (const ev of stream) {
    if (ev.type === "response.output_item.added" && ev.item.type === "function_call") added = ev.item;
    if (ev.type === "response.function_call_arguments.delta") args += ev.delta;
    if (ev.type === "response.function_call_arguments.done") done = ev.arguments;
    if (ev.type === "response.completed") final = ev.response;
  }
  assert.equal(added.name, "get_weather");
  assert.ok(args.length > 0);
  assert.equal(args, done);
  checkArgs(done);
  const fc = final.output.find((o) => o.type === "function_call");
  assert.equal(fc.arguments, done);

  // the next turn sends the call and its output back, statelessly
  const next = await client.responses.create({
    model: agent, tools: [weather], max_output_tokens: 8, temperature: 0,
    input: [
      { role: "user", content: "Weather in Paris?" },
      { type: "function_call", call_id: call.call_id, name: call.name, arguments: call.arguments },
      { type: "function_call_output", call_id: call.call_id, output: "sunny" },
    ],
  });
  assert.equal(next.object, "response");
});

test("responses: what needs stored state is a 400", async () => {
  await assert.rejects(client.responses.create({ model: story, input: "x", previous_response_id: "resp_123" }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, "previous_response_id");
    return true;
  });
  await assert.rejects(client.responses.create({ model: story, input: "x", store: true }), (e) => e.status === 400);
});

test("models: prices per 1M tokens from the metadata file, exactly", async () => {
  const m = await client.models.retrieve(agent);
  assert.equal(m.name, "Qwen3 (synthetic)");
  assert.deepEqual(m.pricing, {
    currency: "USD", unit: "1M tokens", input: "0.1", output: "0.4", cache_read: "0.01", cache_write: "0.125",
  });
  assert.deepEqual(m.input_modalities, ["text"]);
  assert.equal(m.provider.name, "memra npm test");
  const e = await client.models.retrieve(embedModel);
  assert.equal(e.pooling, "last");
  assert.deepEqual(e.output_modalities, ["embedding"]);
});

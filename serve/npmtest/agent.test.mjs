// Tools, structured output and reasoning through the official openai
// client, on "qwen3": a one-layer Qwen3-shaped model with random weights,
// the real Qwen vocabulary and the Qwen3 template. Random weights write
// nonsense, so every test constrains decoding (tool_choice, json_schema,
// grammar) and checks the shape the SDK parses.
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { zodResponseFormat } from "openai/helpers/zod";
import { z } from "zod";

const baseURL = process.env.MEMRA_URL;
const model = process.env.MEMRA_AGENT_MODEL;
if (!baseURL || !model) {
  throw new Error("run through serve/npmtest/run.sh (MEMRA_URL, MEMRA_AGENT_MODEL)");
}
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0 });
const user = (content) => [{ role: "user", content }];

const weatherTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Current weather of a city",
    parameters: {
      type: "object",
      properties: {
        city: { type: "string", maxLength: 10 },
        unit: { type: "string", enum: ["celsius", "fahrenheit"] },
      },
      required: ["city", "unit"],
      additionalProperties: false,
    },
  },
};
const timeTool = {
  type: "function",
  function: {
    name: "get_time",
    parameters: { type: "object", properties: { tz: { enum: ["UTC", "CET"] } }, required: ["tz"] },
  },
};

function checkWeatherArgs(text) {
  const args = JSON.parse(text);
  assert.equal(typeof args.city, "string");
  assert.ok(args.city.length <= 10);
  assert.ok(["celsius", "fahrenheit"].includes(args.unit));
  assert.deepEqual(Object.keys(args).sort(), ["city", "unit"]);
}

test("tools: named tool_choice, blocking", async () => {
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.create({
      model, messages: user("Weather in Paris?"), tools: [weatherTool, timeTool],
      tool_choice: { type: "function", function: { name: "get_weather" } },
      temperature: 1, seed, max_tokens: 120,
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, "tool_calls");
    assert.equal(c.message.content, null);
    assert.equal(c.message.tool_calls.length, 1);
    const call = c.message.tool_calls[0];
    assert.match(call.id, /^call_/);
    assert.equal(call.type, "function");
    assert.equal(call.function.name, "get_weather");
    checkWeatherArgs(call.function.arguments);
  }
});

test("tools: required, streamed and assembled by the SDK's stream helper", async () => {
  const stream = client.chat.completions.stream({
    model, messages: user("What time is it?"), tools: [weatherTool, timeTool],
    tool_choice: "required", temperature: 1, seed: 7, max_tokens: 120,
  });
  let argDeltas = 0;
  let streamed = "";
  stream.on("tool_calls.function.arguments.delta", (e) => { argDeltas++; streamed += e.arguments_delta; });
  const done = await stream.finalChatCompletion();
  const c = done.choices[0];
  assert.equal(c.finish_reason, "tool_calls");
  assert.equal(c.message.tool_calls.length, 1);
  const call = c.message.tool_calls[0];
  assert.ok(["get_weather", "get_time"].includes(call.function.name));
  const args = JSON.parse(call.function.arguments);
  if (call.function.name === "get_time") {
    assert.ok(["UTC", "CET"].includes(args.tz));
  } else {
    checkWeatherArgs(call.function.arguments);
  }
  // The arguments stream as the model writes them, several fragments that
  // join to the final arguments.
  assert.ok(argDeltas > 1, `arguments came in ${argDeltas} delta(s)`);
  assert.equal(streamed, call.function.arguments);
});

test("tools: a tool result goes back through the template", async () => {
  const r = await client.chat.completions.create({
    model, tools: [weatherTool], max_tokens: 4, temperature: 0,
    messages: [
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function",
        function: { name: "get_weather", arguments: '{"city":"Paris","unit":"celsius"}' } }] },
      { role: "tool", tool_call_id: "call_1", content: "21 degrees" },
    ],
  });
  assert.equal(r.object, "chat.completion");
  assert.ok(r.usage.prompt_tokens > 20);
});

test("response_format: zod schema parsed by the SDK", async () => {
  const Person = z.object({
    name: z.string().max(8),
    age: z.number().int().min(0).max(120),
    member: z.boolean(),
  });
  for (const seed of [1, 2]) {
    const r = await client.chat.completions.parse({
      model, messages: user("Describe a person."), temperature: 1, seed, max_tokens: 200,
      response_format: zodResponseFormat(Person, "person"),
    });
    const msg = r.choices[0].message;
    assert.ok(msg.parsed, "the SDK parsed the content");
    assert.deepEqual(Person.parse(msg.parsed), msg.parsed);
  }
});

test("response_format: json_schema strict, streamed", async () => {
  const stream = await client.chat.completions.create({
    model, messages: user("A list."), temperature: 1, seed: 3, max_tokens: 200, stream: true,
    response_format: { type: "json_schema", json_schema: { name: "l", strict: true, schema: {
      type: "object", properties: { items: { type: "array", items: { type: "integer" }, maxItems: 4 } },
      required: ["items"], additionalProperties: false } } },
  });
  let text = "";
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? "";
  }
  const v = JSON.parse(text);
  assert.ok(Array.isArray(v.items) && v.items.length <= 4);
  for (const i of v.items) assert.ok(Number.isInteger(i));
});

const thinkGrammar = 'root ::= "<think>" [a-z ]{1,20} "</think>" [a-z]{1,10}';

test("reasoning: reasoning_content apart from content, blocking and streamed", async () => {
  const r = await client.chat.completions.create({
    model, messages: user("Think, then answer."), temperature: 1, seed: 5, max_tokens: 60,
    grammar: thinkGrammar,
  });
  const msg = r.choices[0].message;
  assert.match(msg.reasoning_content, /^[a-z ]{1,20}$/);
  assert.match(msg.content, /^[a-z]{1,10}$/);

  const stream = await client.chat.completions.create({
    model, messages: user("Think, then answer."), temperature: 1, seed: 5, max_tokens: 60,
    grammar: thinkGrammar, stream: true,
  });
  let reasoning = "", content = "";
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta ?? {};
    reasoning += d.reasoning_content ?? "";
    content += d.content ?? "";
  }
  assert.equal(reasoning, msg.reasoning_content);
  assert.equal(content, msg.content);
});

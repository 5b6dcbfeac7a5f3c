#!/usr/bin/env node
// Scripted OpenAI-compatible chat-completions server for the loopguard OpenClaw e2e harness.
// Every request that offers tools is answered with the SAME tool call (same tool, same args),
// so the agent is stuck in a tool loop until something (loopguard) stops it. After
// MODEL_MAX_TOOL_CALLS tool-call answers it gives a final text answer, so a run with loopguard
// failing open still ends. With MODEL_OVERFLOW_AT=N it answers the first request that carries N
// tool results with an OpenAI-style context_length_exceeded error (once), so OpenClaw compacts
// the session and retries. With MODEL_PAUSE_FILE the first request whose latest tool result is
// a refused call (loopguard's refusal) is answered only once that file exists: an operator's
// time to act (e.g. `loopguard release`) before the agent asks again. Node stdlib only; listens
// on 127.0.0.1 only. One server per run.
//
// env: MODEL_PORT (0 = pick one; the chosen port is printed as JSON on stdout's first line)
//      MODEL_TOOL (default "read"), MODEL_TOOL_ARGS (JSON, default {"path":"loop.txt"})
//      MODEL_MAX_TOOL_CALLS (default 40), MODEL_OVERFLOW_AT (default 0: never),
//      MODEL_PAUSE_FILE (optional), MODEL_PAUSE_TIMEOUT_MS (default 300000: then it answers),
//      MODEL_LOG (optional JSONL file of requests)
import http from "node:http";
import fs from "node:fs";

const tool = process.env.MODEL_TOOL || "read";
const toolArgs = process.env.MODEL_TOOL_ARGS || JSON.stringify({ path: "loop.txt" });
const maxToolCalls = Number(process.env.MODEL_MAX_TOOL_CALLS || 40);
const overflowAt = Number(process.env.MODEL_OVERFLOW_AT || 0);
let overflowed = false;
const pauseFile = process.env.MODEL_PAUSE_FILE || "";
const pauseTimeoutMs = Number(process.env.MODEL_PAUSE_TIMEOUT_MS || 300_000);
let paused = false;
const REFUSAL = /loopguard (refused|blocked) this call/;
const logFile = process.env.MODEL_LOG;
let toolCallsServed = 0;
let requests = 0;

function log(entry) {
  if (logFile) fs.appendFileSync(logFile, JSON.stringify(entry) + "\n");
}

function answerFor(body) {
  const tools = Array.isArray(body.tools) ? body.tools : [];
  const names = tools.map((t) => t?.function?.name).filter(Boolean);
  const messages = Array.isArray(body.messages) ? body.messages : [];
  const toolResults = messages.filter((m) => m?.role === "tool").length;
  if (overflowAt > 0 && !overflowed && toolResults >= overflowAt) {
    // once: claim the context is full, so OpenClaw compacts the session and retries the turn
    overflowed = true;
    return { kind: "overflow" };
  }
  if (names.includes(tool) && toolCallsServed < maxToolCalls) {
    toolCallsServed += 1;
    return { kind: "tool", id: `call_${toolCallsServed}`, name: tool, args: toolArgs };
  }
  // no tools offered (a compaction summary request) or the budget is spent: plain text
  return { kind: "text", text: names.length ? `done after ${toolCallsServed} tool calls` : `Summary: the user asked to read ${toolArgs}; the assistant kept calling ${tool}.` };
}

/** Once: when the latest tool result is a refusal, wait for MODEL_PAUSE_FILE; the ms waited. */
async function pauseAfterRefusal(body, text) {
  if (!pauseFile || paused) return undefined;
  const results = (Array.isArray(body.messages) ? body.messages : []).filter((m) => m?.role === "tool");
  if (!results.length || !REFUSAL.test(text(results[results.length - 1]))) return undefined;
  paused = true;
  const started = Date.now();
  while (!fs.existsSync(pauseFile) && Date.now() - started < pauseTimeoutMs) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return Date.now() - started;
}

function sendJson(res, status, obj) {
  const data = JSON.stringify(obj);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(data) });
  res.end(data);
}

const server = http.createServer((req, res) => {
  let raw = "";
  req.on("data", (c) => (raw += c));
  req.on("end", async () => {
    requests += 1;
    const url = req.url || "";
    if (req.method === "GET" && url.endsWith("/models")) {
      return sendJson(res, 200, { object: "list", data: [{ id: "loop-model", object: "model", owned_by: "loopguard-e2e" }] });
    }
    if (req.method === "GET" && url === "/stats") {
      return sendJson(res, 200, { requests, toolCallsServed });
    }
    if (req.method !== "POST" || !url.endsWith("/chat/completions")) {
      log({ unexpected: `${req.method} ${url}` });
      return sendJson(res, 404, { error: { message: `no route ${req.method} ${url}` } });
    }
    let body = {};
    try { body = JSON.parse(raw || "{}"); } catch { return sendJson(res, 400, { error: { message: "bad json" } }); }
    const text = (m) => (typeof m?.content === "string" ? m.content : Array.isArray(m?.content) ? m.content.map((p) => p?.text ?? "").join("") : "");
    const pausedMs = await pauseAfterRefusal(body, text);
    const answer = answerFor(body);
    log({
      n: requests, stream: !!body.stream, model: body.model, tools: (body.tools || []).map((t) => t?.function?.name),
      toolResultsText: (body.messages || []).filter((m) => m?.role === "tool").map(text), answer,
      ...(pausedMs === undefined ? {} : { pausedMs }),
    });
    const id = `chatcmpl-${requests}`;
    const created = Math.floor(Date.now() / 1000);
    const model = body.model || "loop-model";
    const usage = { prompt_tokens: 100, completion_tokens: 10, total_tokens: 110 };
    if (answer.kind === "overflow") {
      return sendJson(res, 400, {
        error: {
          message: "This model's maximum context length is 8192 tokens. However, your messages resulted in 9100 tokens. Please reduce the length of the messages.",
          type: "invalid_request_error", param: "messages", code: "context_length_exceeded",
        },
      });
    }
    if (!body.stream) {
      const message = answer.kind === "tool"
        ? { role: "assistant", content: null, tool_calls: [{ id: answer.id, type: "function", function: { name: answer.name, arguments: answer.args } }] }
        : { role: "assistant", content: answer.text };
      return sendJson(res, 200, {
        id, object: "chat.completion", created, model,
        choices: [{ index: 0, message, finish_reason: answer.kind === "tool" ? "tool_calls" : "stop" }], usage,
      });
    }
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
    const chunk = (delta, finish = null, extra = {}) =>
      res.write(`data: ${JSON.stringify({ id, object: "chat.completion.chunk", created, model, choices: [{ index: 0, delta, finish_reason: finish }], ...extra })}\n\n`);
    chunk({ role: "assistant", content: "" });
    if (answer.kind === "tool") {
      chunk({ tool_calls: [{ index: 0, id: answer.id, type: "function", function: { name: answer.name, arguments: "" } }] });
      chunk({ tool_calls: [{ index: 0, function: { arguments: answer.args } }] });
      chunk({}, "tool_calls");
    } else {
      chunk({ content: answer.text });
      chunk({}, "stop");
    }
    if (body.stream_options?.include_usage) {
      res.write(`data: ${JSON.stringify({ id, object: "chat.completion.chunk", created, model, choices: [], usage })}\n\n`);
    }
    res.write("data: [DONE]\n\n");
    res.end();
  });
});

server.listen(Number(process.env.MODEL_PORT || 0), "127.0.0.1", () => {
  process.stdout.write(JSON.stringify({ port: server.address().port }) + "\n");
});
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => server.close(() => process.exit(0)));

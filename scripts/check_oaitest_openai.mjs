// The official OpenAI Node client (npm `openai`) against internal/oaitest: one plain and one
// streamed chat completion, printed as one JSON line each, so that the fake server's wire shapes
// are checked by a real client, not only by ours. Driven by internal/oaitest's
// TestOfficialNodeClient, which starts the servers, and by inference/serve's TestGuardedOfficialNodeClient
// against `student serve`'s handler behind its API key ($CHAINEDSQL_API_KEY, sent as the bearer
// token); not part of CI (it needs the npm package):
//
//   npm install openai          # in any folder, e.g. /tmp/npmopenai
//   CHAINEDSQL_NODE_MODULES=/tmp/npmopenai/node_modules go test -run OfficialNodeClient ./internal/oaitest
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const OpenAI = require("openai").default ?? require("openai");

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: process.env.CHAINEDSQL_API_KEY || "none", maxRetries: 0 });
const messages = [{ role: "user", content: "Question: how many?" }];
const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");

const plain = await client.chat.completions.create({ model, messages });
const m = plain.choices[0].message;
out({ mode: "plain", content: m.content, reasoning_content: m.reasoning_content ?? null, reasoning: m.reasoning ?? null,
  finish: plain.choices[0].finish_reason, usage: plain.usage });

const stream = await client.chat.completions.create({ model, messages, stream: true, stream_options: { include_usage: true } });
const acc = { mode: "stream", content: "", reasoning_content: "", reasoning: "", finish: null, usage: null, chunks: 0 };
for await (const chunk of stream) {
  acc.chunks++;
  if (chunk.usage) acc.usage = chunk.usage;
  for (const ch of chunk.choices ?? []) {
    const d = ch.delta ?? {};
    acc.content += d.content ?? "";
    acc.reasoning_content += d.reasoning_content ?? "";
    acc.reasoning += d.reasoning ?? "";
    if (ch.finish_reason) acc.finish = ch.finish_reason;
  }
}
out(acc);

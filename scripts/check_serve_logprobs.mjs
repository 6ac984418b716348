// The official OpenAI Node client (npm `openai`) against `student serve`'s handler: one
// completion and one stream (gathered by the client's own stream helper) with n, logprobs,
// top_logprobs and logit_bias, then the completion again with vLLM's
// return_tokens_as_token_ids (a field the client does not know, passed in the body as is),
// each printed as one JSON line of its choices (index, content, finish reason, and each
// logprobs entry's token, logprob, bytes and top_logprobs), so that the wire shape is checked
// by a real client. Driven by inference/serve's
// TestOfficialNodeClientLogprobs; not part of CI (it needs the npm package):
//
//   npm install openai          # in any folder, e.g. /tmp/npmopenai
//   CHAINEDSQL_NODE_MODULES=/tmp/npmopenai/node_modules go test -run OfficialNodeClient ./inference/serve
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const OpenAI = require("openai").default ?? require("openai");

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "none", maxRetries: 0 });
const req = { model, messages: [{ role: "user", content: "Question: how many?" }], n: 2, temperature: 1, seed: 3,
  logprobs: true, top_logprobs: 2, logit_bias: { "65": -100 } };
const out = (mode, c) => process.stdout.write(JSON.stringify({ mode, usage: c.usage, choices: c.choices.map((ch) => ({
  index: ch.index, content: ch.message.content, finish: ch.finish_reason,
  logprobs: ch.logprobs.content.map((e) => ({ token: e.token, logprob: e.logprob, bytes: e.bytes, top_logprobs: e.top_logprobs })),
})) }) + "\n");

out("plain", await client.chat.completions.create(req));
const stream = client.chat.completions.stream({ ...req, stream_options: { include_usage: true } });
out("stream", await stream.finalChatCompletion());
out("ids", await client.chat.completions.create({ ...req, return_tokens_as_token_ids: true }));

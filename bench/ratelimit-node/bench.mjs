// The OpenAI Node SDK in a p-limit promise pool: RECORDS chat completions
// against BASE_URL with CONCURRENCY at once and the SDK's own retries
// (MAX_RETRIES; the SDK's default is 2). Prints one JSON line:
// {"ok":…, "failed":…, "elapsed":seconds}. Run by ratelimit/bench_test.go.
import OpenAI from "openai";
import pLimit from "p-limit";

const records = Number(process.env.RECORDS ?? 400);
const concurrency = Number(process.env.CONCURRENCY ?? 32);
const maxRetries = Number(process.env.MAX_RETRIES ?? 2);
const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: process.env.OPENAI_API_KEY ?? "sk-bench", maxRetries });
const limit = pLimit(concurrency);

const start = performance.now();
let ok = 0, failed = 0;
await Promise.all(Array.from({ length: records }, (_, i) => limit(async () => {
  try {
    await client.chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: `Summarise: record ${i + 1}` }] });
    ok++;
  } catch {
    failed++;
  }
})));
console.log(JSON.stringify({ ok, failed, elapsed: (performance.now() - start) / 1000 }));

// nats.js side of bench/bench_kv.py: one workload per process.
//   node bench/kv_natsjs.mjs ARGS.json     (run from a folder whose node_modules has
//                                           @nats-io/transport-node and @nats-io/kv)
// ARGS.json: {"url", "bucket", "workload": "keys" | "get_all" | "get_listed", "listed": [keys]}
// Prints one JSON line: {"elapsed_ns", "cpu_us", "keys"} or {"elapsed_ns", "cpu_us", "values"}.

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

// Resolve the packages from the working folder (the bench's node folder), not from this file's.
const require = createRequire(join(process.cwd(), "noop.js"));
const { connect } = await import(require.resolve("@nats-io/transport-node"));
const { Kvm } = await import(require.resolve("@nats-io/kv"));

const args = JSON.parse(readFileSync(process.argv[2], "utf8"));
const nc = await connect({ servers: args.url });
const kv = await new Kvm(nc).open(args.bucket);
const latin1 = new TextDecoder("latin1");

const cpu0 = process.cpuUsage();
const t0 = process.hrtime.bigint();
const out = {};
if (args.workload === "keys") {
  const keys = [];
  for await (const k of await kv.keys()) keys.push(k);
  out.keys = keys;
} else if (args.workload === "get_all") {
  // No batch read in nats.js: a watcher of every key, read until its initial values end
  // (the entry with nothing pending after it).
  const values = {};
  const w = await kv.watch();
  for await (const e of w) {
    values[e.key] = latin1.decode(e.value);
    if (e.delta === 0 || e.isUpdate) break;
  }
  w.stop();
  out.values = values;
} else {
  const values = {};
  for (const k of args.listed) {
    const e = await kv.get(k);
    values[k] = latin1.decode(e.value);
  }
  out.values = values;
}
const elapsed = process.hrtime.bigint() - t0;
const cpu = process.cpuUsage(cpu0);
out.elapsed_ns = Number(elapsed);
out.cpu_us = cpu.user + cpu.system;
await nc.close();
await new Promise((resolve) => process.stdout.write(JSON.stringify(out) + "\n", resolve));

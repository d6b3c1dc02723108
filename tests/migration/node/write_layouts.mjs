// Writes, with BullMQ's own Node client, the layouts the 5.x line keeps differently from 6.x: a
// paused queue holding waiting and prioritized jobs, job schedulers (an interval and a cron
// pattern, each with its pending iteration), and deduplicated jobs (simple and with a ttl).
// Then prints, as JSON, what BullMQ itself reports of each.
// Usage: node write_layouts.mjs <redis-url> <prefix>
import { Queue } from "bullmq";

const [url, prefix] = process.argv.slice(2);
const u = new URL(url);
const connection = { host: u.hostname, port: Number(u.port || 6379), db: Number(u.pathname.slice(1) || 0) };

const held = new Queue("held", { connection, prefix });
const heldJobs = [
  await held.add("first", { n: 1 }),
  await held.add("urgent", { n: 2 }, { priority: 1 }),
  await held.add("second", { n: 3 }),
];
await held.pause();

const ticks = new Queue("ticks", { connection, prefix });
await ticks.upsertJobScheduler("every-hour", { every: 3600000 }, { name: "tick", data: { kind: "interval" } });
await ticks.upsertJobScheduler("nightly", { pattern: "0 3 * * *", tz: "UTC" }, { name: "report", data: { kind: "cron" } });

const dedup = new Queue("dedup", { connection, prefix });
const simple = await dedup.add("simple", { n: 1 }, { deduplication: { id: "simple-key" } });
const timed = await dedup.add("timed", { n: 2 }, { deduplication: { id: "timed-key", ttl: 600000 }, delay: 60000 });

const out = { held: { paused: await held.isPaused(), jobs: {} }, ticks: { schedulers: {} }, dedup: {} };
for (const job of heldJobs) {
  out.held.jobs[job.id] = { name: job.name, state: await (await held.getJob(job.id)).getState() };
}
for (const s of await ticks.getJobSchedulers(0, -1, true)) {
  out.ticks.schedulers[s.key] = { next: s.next, every: s.every ?? null, pattern: s.pattern ?? null, name: s.name };
}
out.ticks.iterations = {};
for (const state of ["waiting", "delayed"]) {
  for (const job of await ticks.getJobs([state])) {
    out.ticks.iterations[job.id] = { name: job.name, state, data: job.data };
  }
}
out.dedup = {
  "simple-key": { holder: await dedup.getDeduplicationJobId("simple-key"), id: simple.id },
  "timed-key": { holder: await dedup.getDeduplicationJobId("timed-key"), id: timed.id },
};
for (const q of [held, ticks, dedup]) await q.close();
console.log(JSON.stringify(out));
process.exit(0);

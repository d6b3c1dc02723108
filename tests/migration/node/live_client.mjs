// BullMQ's Node client on Redis during a live move (tests/migration/test_live_move_flows.py).
// Usage: node live_client.mjs <redis-url> <prefix> add
//   adds waiting, delayed and prioritized jobs to "main" and two jobs to the paused queue
//   "held"; prints their ids as JSON.
// Usage: node live_client.mjs <redis-url> <prefix> busy <total>
//   a worker processes "main" while <total> jobs are added (every 7th delayed 200 ms); prints
//   "produced" once all are added, then, when stdin closes, the numbers it processed as JSON.
import { Queue, Worker } from "bullmq";

const [url, prefix, mode, total] = process.argv.slice(2);
const u = new URL(url);
const connection = { host: u.hostname, port: Number(u.port || 6379), db: Number(u.pathname.slice(1) || 0) };
const main = new Queue("main", { connection, prefix });

if (mode === "add") {
  const held = new Queue("held", { connection, prefix });
  await held.pause();
  const out = {
    waiting: (await main.add("w", { n: 1 })).id,
    delayed: (await main.add("d", { n: 2 }, { delay: 3600000 })).id,
    prioritized: (await main.add("p", { n: 3 }, { priority: 5 })).id,
    held: [(await held.add("h", { n: 4 })).id, (await held.add("h", { n: 5 })).id],
  };
  await held.close();
  await main.close();
  console.log(JSON.stringify(out));
} else {
  const ran = [];
  const worker = new Worker("main", async (job) => { ran.push(job.data.n); }, { connection, prefix });
  await worker.waitUntilReady();
  console.log("started");
  for (let n = 0; n < Number(total); n++) {
    await main.add("job", { n }, n % 7 === 0 ? { delay: 200 } : {});
    if (n % 20 === 0) await new Promise((r) => setTimeout(r, 50));
  }
  console.log("produced");
  process.stdin.resume();
  await new Promise((r) => process.stdin.on("end", r));
  await worker.close();
  await main.close();
  console.log(JSON.stringify(ran));
}

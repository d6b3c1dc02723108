// Writes, with BullMQ's own Node client, one flow per child-failure option (none,
// failParentOnFailure, ignoreDependencyOnFailure, removeDependencyOnFailure,
// continueParentOnFailure): a parent with a child that fails and a child still waiting (its
// queue has no worker). Then prints, as JSON, the state BullMQ itself reports for every job.
// Usage: node write_child_failures.mjs <redis-url> <prefix>
import { FlowProducer, Worker, QueueEvents, Queue } from "bullmq";

const [url, prefix] = process.argv.slice(2);
const u = new URL(url);
const connection = { host: u.hostname, port: Number(u.port || 6379), db: Number(u.pathname.slice(1) || 0) };
const options = ["none", "failParentOnFailure", "ignoreDependencyOnFailure",
                 "removeDependencyOnFailure", "continueParentOnFailure"];
const flows = new FlowProducer({ connection, prefix });
const trees = [];
for (const option of options) {
  const opts = option === "none" ? {} : { [option]: true };
  trees.push(await flows.add({
    name: `parent-${option}`, queueName: "parents", data: { option },
    children: [
      { name: `failing-${option}`, queueName: "failing", data: { option }, opts },
      { name: `pending-${option}`, queueName: "idle", data: { option } },
    ],
  }));
}
const events = new QueueEvents("failing", { connection, prefix });
await events.waitUntilReady();
let failed = 0;
const allFailed = new Promise((resolve) => events.on("failed", () => {
  if (++failed === options.length) resolve();
}));
const worker = new Worker("failing", async () => { throw new Error("child broke"); },
                          { connection, prefix });
await allFailed;
await worker.close();
await events.close();
const states = {};
for (const tree of trees) {
  for (const node of [tree, ...tree.children]) {
    const queue = new Queue(node.job.queueName, { connection, prefix });
    const job = await queue.getJob(node.job.id);
    states[`${node.job.queueName}:${node.job.id}`] = {
      name: node.job.name, state: await job.getState(),
    };
    await queue.close();
  }
}
await flows.close();
console.log(JSON.stringify(states));
process.exit(0);

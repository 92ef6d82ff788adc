// A small stated client for Node.js, written from api/stated.proto and
// docs/protocol.md alone with the stock @grpc/grpc-js and @grpc/proto-loader:
// the second client the conformance script (conformance.js) runs in CI.
//
// It follows the guide: one batch stream per instance with several requests
// in flight, sparse results expanded to one per operation, snapshots as
// barriers on the stream, key groups computed as the proto specifies.
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

// The proto next to this file in the published package (npm pack copies it
// there), else the repository's.
const PROTO = [path.join(__dirname, 'stated.proto'), path.join(__dirname, '..', '..', 'api', 'stated.proto')]
  .find((p) => fs.existsSync(p)) || path.join(__dirname, '..', '..', 'api', 'stated.proto');

const definition = protoLoader.loadSync(PROTO, {
  // uint64 and int64 as JS numbers: checkpoint ids and sums stay far below
  // 2^53 here. A client that needs the full range uses String or Long.
  longs: Number,
  enums: String,
  defaults: true,
  oneofs: true,
});
const pkg = grpc.loadPackageDefinition(definition).stated.v1;

// Key hash, as stated.proto specifies it: FNV-1a 32 of the key bytes read as
// a signed int, Flink's murmur step, then the modulo. Math.imul and |0 keep
// every step in signed 32-bit arithmetic, as Java's int does.
function fnv1a32(key) {
  let h = 0x811c9dc5 | 0;
  for (const b of key) {
    h ^= b;
    h = Math.imul(h, 16777619);
  }
  return h | 0;
}

function murmur(code) {
  let k = Math.imul(code, 0xcc9e2d51);
  k = (k << 15) | (k >>> 17);
  k = Math.imul(k, 0x1b873593);
  let x = (k << 13) | (k >>> 19);
  x = (Math.imul(x, 5) + 0xe6546b64) | 0;
  x ^= 4;
  x ^= x >>> 16;
  x = Math.imul(x, 0x85ebca6b);
  x ^= x >>> 13;
  x = Math.imul(x, 0xc2b2ae35);
  x ^= x >>> 16;
  x |= 0;
  if (x >= 0) return x;
  return x === -2147483648 ? 0 : -x;
}

function keyGroup(key, maxParallelism) {
  return murmur(fnv1a32(key)) % maxParallelism;
}

// StatedError is a failed call, stream or operation: code is the gRPC
// status code (grpc.status), message the daemon's.
class StatedError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
    this.codeName = grpc.status[code] || String(code);
  }
}

function toBuffer(b) {
  if (b === undefined || b === null) return Buffer.alloc(0);
  return Buffer.isBuffer(b) ? b : Buffer.from(String(b));
}

class Client {
  // target: "unix:///path/to/stated.sock" or "host:port" (then a token).
  constructor(target, { token } = {}) {
    this.rpc = new pkg.Stated(target, grpc.credentials.createInsecure(), {
      // The daemon answers reads with messages up to its max_message_size
      // (16 MiB by default); grpc-js accepts 4 MiB unless told.
      'grpc.max_receive_message_length': 64 << 20,
      'grpc.max_send_message_length': 64 << 20,
      // Larger HTTP/2 windows than the 64 KiB default: batches of a few
      // hundred KiB in flight are not held back by flow control.
      'grpc-node.flow_control_window': 16 << 20,
    });
    this.meta = new grpc.Metadata();
    if (token) this.meta.set('authorization', `Bearer ${token}`);
  }

  call(method, req) {
    return new Promise((resolve, reject) => {
      this.rpc[method](req, this.meta, (err, resp) => {
        if (err) reject(new StatedError(err.code, err.details || err.message));
        else resolve(resp);
      });
    });
  }

  // open opens an instance and binds its batch stream. spec is an
  // OpenRequest (camelCase fields); returns an Instance.
  async open(spec, opts = {}) {
    const resp = await this.call('Open', spec);
    const inst = new Instance(this, spec.task, resp, opts);
    await inst.start();
    return inst;
  }

  completeCheckpoint(job, checkpointId, tasks) {
    return this.call('CompleteCheckpoint', { job, checkpointId, tasks: tasks || [] });
  }

  abortCheckpoint(job, checkpointId, reasonCode, reason) {
    return this.call('AbortCheckpoint', { job, checkpointId, reasonCode, reason });
  }

  listCheckpoints(job) {
    return this.call('ListCheckpoints', { job });
  }

  // triggerSavepoint writes a savepoint of every open instance of job. The
  // daemon refuses it (FAILED_PRECONDITION) unless batchesAnswered is set:
  // a savepoint holds only what the daemon applied, so first await drain()
  // of every instance of the job, then pass batchesAnswered: true.
  triggerSavepoint(job, { format = 'SAVEPOINT_FORMAT_CANONICAL', checkpointId = 0, batchesAnswered = false } = {}) {
    return this.call('TriggerSavepoint', { job, format, checkpointId, batchesAnswered });
  }

  close() {
    this.rpc.close();
  }
}

// Instance is an open instance with its batch stream. send() writes a request
// at once (up to maxInFlight unanswered) and resolves with its response
// expanded: one result per operation, in order.
class Instance {
  constructor(client, task, open, { maxInFlight = 8 } = {}) {
    this.client = client;
    this.task = task;
    this.job = task.job;
    this.id = open.instanceId;
    this.open = open;
    this.maxParallelism = open.maxParallelism;
    this.keyGroups = open.keyGroups;
    // The daemon's protocol revision (0: one from before revisions were
    // advertised) and its read-view limit per instance (stated.proto,
    // OpenResponse). This client uses nothing a revision added, so it
    // opens on any; a caller that uses views checks protocolVersion >= 1.
    this.protocolVersion = open.protocolVersion || 0;
    this.maxViewsPerInstance = open.maxViewsPerInstance || 0;
    this.maxInFlight = Math.max(1, Math.min(maxInFlight, open.streamQueueDepth + 2 || maxInFlight));
    this.seq = 0;
    this.pending = []; // {seq, n, done, resolve, reject}, in send order
    this.waiters = []; // sends waiting for a slot
    this.dead = null;
  }

  // start opens the stream and sends the first request, which names the
  // instance (the daemon ends a stream that does not within its
  // first-batch timeout).
  async start() {
    this.stream = this.client.rpc.Batch(this.client.meta);
    this.stream.on('data', (resp) => this.onResponse(resp));
    this.stream.on('error', (err) => this.fail(new StatedError(err.code, err.details || err.message)));
    this.stream.on('end', () => this.fail(new StatedError(grpc.status.UNAVAILABLE, 'the daemon ended the batch stream')));
    await this.send([]);
  }

  onResponse(resp) {
    const p = this.pending.shift();
    if (!p || Number(resp.seq) !== p.seq) {
      this.fail(new StatedError(grpc.status.INTERNAL, `response ${resp.seq} does not match request ${p && p.seq}`));
      return;
    }
    // Sparse results: no entry means the empty result (success, nothing
    // found or returned).
    const results = new Array(p.n);
    for (const r of resp.results) {
      if (r.index >= p.n) {
        this.fail(new StatedError(grpc.status.INTERNAL, `result index ${r.index} of a request of ${p.n} operations`));
        return;
      }
      results[r.index] = r;
    }
    for (let i = 0; i < p.n; i++) {
      if (!results[i]) results[i] = { code: 0, error: '', found: false, value: Buffer.alloc(0), values: [], entries: [], more: false, timers: [], index: i };
    }
    p.resolve({ results, snapshot: resp.snapshot || null });
    const w = this.waiters.shift();
    if (w) w();
  }

  fail(err) {
    if (this.dead) return;
    this.dead = err;
    for (const p of this.pending.splice(0)) p.reject(err);
    for (const w of this.waiters.splice(0)) w();
  }

  // send sends ops (Op messages) and, if given, a snapshot barrier
  // ({checkpointId, wait}); it waits only for a free in-flight slot.
  async send(ops, snapshot) {
    while (!this.dead && this.pending.length >= this.maxInFlight) {
      await new Promise((resolve) => this.waiters.push(resolve));
    }
    if (this.dead) throw this.dead;
    const seq = ++this.seq;
    const req = { seq, ops };
    if (seq === 1) {
      req.instanceId = this.id;
      req.job = this.job;
    }
    if (snapshot) req.snapshot = snapshot;
    const p = { seq, n: ops.length };
    p.done = new Promise((resolve, reject) => { p.resolve = resolve; p.reject = reject; });
    this.pending.push(p);
    this.stream.write(req);
    return p.done;
  }

  // drain resolves once every request sent so far has been answered (or the
  // stream failed): then the daemon has applied them all.
  async drain() {
    const last = this.pending[this.pending.length - 1];
    if (last) await last.done.catch(() => {});
  }

  // pollTimers polls state's timers due at watermark until a poll says no
  // more are due (TIMER_POLL's more), and returns them all in order.
  async pollTimers(state, watermark, limit = 0) {
    const out = [];
    for (;;) {
      const { results: [r] } = await this.send([{ type: 'OP_TYPE_TIMER_POLL', state, timestamp: watermark, limit }]);
      const err = resultError(r);
      if (err) throw err;
      out.push(...r.timers);
      if (!r.more) return out;
    }
  }

  // snapshot takes checkpoint id as a barrier: it holds every operation
  // sent before it. Rejects with the barrier's error. stats, when given, is
  // a TaskCheckpointStats ({unaligned, alignmentMicros, startDelayMicros}).
  async snapshot(checkpointId, wait = false, stats = undefined) {
    const barrier = { checkpointId, wait };
    if (stats) barrier.stats = stats;
    const { snapshot } = await this.send([], barrier);
    return snapshotResult(snapshot);
  }

  // writeChannelState streams an unaligned checkpoint's in-flight buffers
  // (ChannelChunk messages: {channel, kind, buffers: [{records:
  // [{keyGroup, data}]}]}) for checkpointId, one request per chunk. Call
  // it, and wait for it, before the snapshot barrier of that checkpoint.
  writeChannelState(checkpointId, chunks) {
    return new Promise((resolve, reject) => {
      const call = this.client.rpc.WriteChannelState(this.client.meta, (err, resp) => {
        if (err) reject(new StatedError(err.code, err.details || err.message));
        else resolve(resp);
      });
      call.write({ instanceId: this.id, job: this.job, checkpointId, chunks: [] });
      for (const chunk of chunks) call.write({ chunks: [chunk] });
      call.end();
    });
  }

  // readChannelState collects the restored channel state: the chunks the
  // daemon streams, merged per channel (in stream order).
  readChannelState() {
    return new Promise((resolve, reject) => {
      const out = [];
      const call = this.client.rpc.ReadChannelState({ instanceId: this.id, job: this.job }, this.client.meta);
      call.on('data', (resp) => {
        for (const c of resp.chunks) {
          const last = out[out.length - 1];
          const same = last && last.channel.direction === c.channel.direction && last.channel.gate === c.channel.gate &&
            last.channel.index === c.channel.index;
          if (same) last.buffers.push(...c.buffers);
          else out.push({ channel: c.channel, kind: c.kind, buffers: [...c.buffers] });
        }
      });
      call.on('error', (err) => reject(new StatedError(err.code, err.details || err.message)));
      call.on('end', () => resolve(out));
    });
  }

  // Op builders: the key group is computed from the key.
  op(type, state, key, fields = {}) {
    const k = toBuffer(key);
    return { type, state, key: k, keyGroup: keyGroup(k, this.maxParallelism), ...fields };
  }

  async closeInstance() {
    if (this.stream && !this.dead) {
      this.stream.end();
      this.dead = new StatedError(grpc.status.FAILED_PRECONDITION, 'instance closed');
    }
    await this.client.call('CloseInstance', { instanceId: this.id, job: this.job });
  }

  // abandon ends the stream without closing the instance.
  abandon() {
    if (this.stream) this.stream.cancel();
    this.fail(new StatedError(grpc.status.CANCELLED, 'abandoned'));
  }
}

function snapshotResult(outcome) {
  if (!outcome) throw new StatedError(grpc.status.INTERNAL, 'no snapshot outcome in the response to a barrier');
  if (outcome.code !== 0) throw new StatedError(outcome.code, outcome.error);
  return outcome.result || {};
}

// resultError turns a failed result into a StatedError (null: success).
function resultError(r) {
  return r.code === 0 ? null : new StatedError(r.code, r.error);
}

module.exports = { Client, Instance, StatedError, keyGroup, fnv1a32, murmur, resultError, status: grpc.status, toBuffer };

// Conformance of the Node client (stated.js) against a real daemon.
//
//   node conformance.js --stated <stated binary> --xcheck <xcheck binary> [--only ID,ID] [--bench]
//
// It runs the language-neutral cases of docs/conformance.md by id (KG-1,
// OPS-1, ...): it reads the ids from that file and refuses to run if one has
// no implementation here or an implementation has no case there, so the
// list and this script cannot drift apart. It starts `stated serve` on a
// temporary data dir and socket and runs every case (or those of --only) in
// the order of CASES. --bench then measures batched put and get throughput.
// Exit status 1 on the first failure. scripts/node-conformance.sh builds
// the binaries and runs it.
'use strict';

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn, execFileSync } = require('node:child_process');
const { Client, StatedError, keyGroup, fnv1a32, murmur, status, toBuffer } = require('./stated');

function parseArgs() {
  const a = { bench: false, benchKeys: 400000 };
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i++) {
    switch (argv[i]) {
      case '--stated': a.stated = argv[++i]; break;
      case '--xcheck': a.xcheck = argv[++i]; break;
      case '--bench': a.bench = true; break;
      case '--only': a.only = argv[++i].split(',').filter(Boolean); break;
      case '--bench-keys': a.benchKeys = Number(argv[++i]); break;
      default: throw new Error(`unknown argument ${argv[i]}`);
    }
  }
  if (!a.stated || !a.xcheck) throw new Error('usage: node conformance.js --stated <bin> --xcheck <bin> [--only ID,ID] [--bench]');
  return a;
}

class Failure extends Error {}

function check(cond, msg) {
  if (!cond) throw new Failure(msg);
}

function eqBuf(b, s) {
  return Buffer.isBuffer(b) && b.equals(toBuffer(s));
}

// expectCode checks that a result, outcome or error has code and a message
// naming each of words.
function expectCode(what, got, code, ...words) {
  const c = got ? got.code : undefined;
  const msg = got ? (got.error !== undefined ? got.error : got.message) : '';
  check(c === code, `${what}: code ${status[c] || c} (${msg}), want ${status[code]}`);
  for (const w of words) check(String(msg).includes(w), `${what}: message "${msg}" does not name ${w}`);
}

async function rejects(what, promise, code, ...words) {
  try {
    await promise;
  } catch (err) {
    expectCode(what, err, code, ...words);
    return err;
  }
  throw new Failure(`${what}: succeeded, want ${status[code]}`);
}

// Daemon is `stated serve` on a temporary data dir.
class Daemon {
  constructor(bin) {
    this.bin = bin;
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stated-node-'));
    this.sock = path.join(this.dir, 's.sock');
  }

  async start() {
    try { fs.unlinkSync(this.sock); } catch { /* not there */ }
    this.log = fs.openSync(path.join(this.dir, 'daemon.log'), 'a');
    this.proc = spawn(this.bin, ['serve', '--data-dir', path.join(this.dir, 'data'), '--socket', this.sock,
      '--metrics-addr', '', '--log-level', 'warn'], { stdio: ['ignore', this.log, this.log] });
    this.exited = new Promise((resolve) => this.proc.on('exit', resolve));
    const deadline = Date.now() + 20000;
    for (;;) {
      if (this.proc.exitCode !== null) throw new Failure(`stated serve exited: ${this.tail()}`);
      if (fs.existsSync(this.sock)) {
        const c = new Client(`unix://${this.sock}`);
        try {
          await c.listCheckpoints('probe');
          return;
        } catch { /* not serving yet */ } finally { c.close(); }
      }
      if (Date.now() > deadline) throw new Failure(`stated serve not ready within 20s: ${this.tail()}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  tail() {
    try { return fs.readFileSync(path.join(this.dir, 'daemon.log'), 'utf8').slice(-2000); } catch { return ''; }
  }

  async kill() {
    this.proc.kill('SIGKILL');
    await this.exited;
  }

  async stop() {
    if (this.proc && this.proc.exitCode === null) {
      this.proc.kill('SIGTERM');
      await this.exited;
    }
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

const ALL_STATES = [
  { name: 'v', kind: 'STATE_KIND_VALUE' },
  { name: 'l', kind: 'STATE_KIND_LIST' },
  { name: 'm', kind: 'STATE_KIND_MAP' },
  { name: 'sum', kind: 'STATE_KIND_AGGREGATE', aggregate: 'AGGREGATE_FUNC_SUM', number: 'NUMBER_TYPE_INT64' },
  { name: 'cnt', kind: 'STATE_KIND_AGGREGATE', aggregate: 'AGGREGATE_FUNC_COUNT', number: 'NUMBER_TYPE_INT64' },
  { name: 'fmax', kind: 'STATE_KIND_AGGREGATE', aggregate: 'AGGREGATE_FUNC_MAX', number: 'NUMBER_TYPE_FLOAT64' },
  { name: 't', kind: 'STATE_KIND_TIMERS' },
];

// openSpec declares the specified key hash: the daemon then checks every key
// group this client computes.
function openSpec(job, backendKind, extra = {}) {
  return { task: { job, operator: 'op', subtask: 0 }, parallelism: 1, backendKind, states: ALL_STATES, keyHash: 'KEY_HASH_FNV1A_MURMUR', ...extra };
}

// KG-1: Key-group vectors, computed from the spec in stated.proto.
function keyGroupVectors() {
  const doc = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'api', 'testdata', 'keygroups.json'), 'utf8'));
  check(doc.vectors.length >= 10, 'too few vectors');
  let negative = 0;
  for (const v of doc.vectors) {
    const key = Buffer.from(v.key_hex, 'hex');
    const h = fnv1a32(key);
    check(h === v.fnv1a32, `key ${v.key_hex}: fnv1a32 ${h}, want ${v.fnv1a32}`);
    if (h < 0) negative++;
    check(murmur(h) === v.murmur, `key ${v.key_hex}: murmur ${murmur(h)}, want ${v.murmur}`);
    for (const p of doc.max_parallelisms) {
      const kg = keyGroup(key, p);
      check(kg === v.key_groups[String(p)], `key ${v.key_hex}, max parallelism ${p}: key group ${kg}, want ${v.key_groups[String(p)]}`);
    }
  }
  check(negative > 0, 'no vector with a negative hash');
}

// OPS-1: Every state kind, on every backend.
async function stateKinds(c) {
  for (const kind of ['BACKEND_KIND_HEAP', 'BACKEND_KIND_FILE', 'BACKEND_KIND_LSM']) {
    const inst = await c.open(openSpec(`kinds-${kind.toLowerCase().slice(13)}`, kind));
    check(inst.open.backendKind === kind, `open: backend ${inst.open.backendKind}, want ${kind}`);
    check(inst.open.maxMessageSize > 0 && inst.open.maxBatchOps > 0 && inst.open.streamQueueDepth > 0 && inst.open.maxPage > 0,
      'open: limits not advertised');
    check(inst.open.keyHash === 'KEY_HASH_FNV1A_MURMUR', `open: key hash ${inst.open.keyHash}`);
    check(inst.protocolVersion >= 1 && inst.maxViewsPerInstance > 0,
      `open: protocol revision ${inst.protocolVersion}, ${inst.maxViewsPerInstance} views per instance`);
    const o = (type, state, key, f) => inst.op(type, state, key, f);
    const int = (n) => ({ numberType: 'NUMBER_TYPE_INT64', intValue: n });
    const ops = [
      o('OP_TYPE_PUT', 'v', 'k1', { value: toBuffer('a') }), // 0
      o('OP_TYPE_GET', 'v', 'k1'), // 1
      o('OP_TYPE_DELETE', 'v', 'k1'), // 2
      o('OP_TYPE_GET', 'v', 'k1'), // 3
      o('OP_TYPE_LIST_APPEND', 'l', 'k1', { values: [toBuffer('x'), toBuffer('y')] }), // 4
      o('OP_TYPE_LIST_APPEND', 'l', 'k1', { values: [toBuffer('z')] }), // 5
      o('OP_TYPE_LIST_GET', 'l', 'k1'), // 6
      o('OP_TYPE_MAP_PUT', 'm', 'k1', { userKey: toBuffer('u1'), value: toBuffer('v1') }), // 7
      o('OP_TYPE_MAP_PUT', 'm', 'k1', { userKey: toBuffer('u2'), value: toBuffer('v2') }), // 8
      o('OP_TYPE_MAP_GET', 'm', 'k1', { userKey: toBuffer('u1') }), // 9
      o('OP_TYPE_MAP_CONTAINS', 'm', 'k1', { userKey: toBuffer('u2') }), // 10
      o('OP_TYPE_MAP_REMOVE', 'm', 'k1', { userKey: toBuffer('u2') }), // 11
      o('OP_TYPE_MAP_CONTAINS', 'm', 'k1', { userKey: toBuffer('u2') }), // 12
      o('OP_TYPE_MAP_ITERATE', 'm', 'k1', { limit: 10 }), // 13
      o('OP_TYPE_AGGREGATE_ADD', 'sum', 'k1', int(5)), // 14
      o('OP_TYPE_AGGREGATE_ADD', 'sum', 'k1', int(-7)), // 15
      o('OP_TYPE_AGGREGATE_GET', 'sum', 'k1'), // 16
      // COUNT still needs the state's number type; the value is ignored.
      o('OP_TYPE_AGGREGATE_ADD', 'cnt', 'k1', int(100)), // 17
      o('OP_TYPE_AGGREGATE_ADD', 'cnt', 'k1', int(0)), // 18
      o('OP_TYPE_AGGREGATE_GET', 'cnt', 'k1'), // 19
      o('OP_TYPE_AGGREGATE_ADD', 'fmax', 'k1', { numberType: 'NUMBER_TYPE_FLOAT64', floatValue: 1.5 }), // 20
      o('OP_TYPE_AGGREGATE_ADD', 'fmax', 'k1', { numberType: 'NUMBER_TYPE_FLOAT64', floatValue: 2.5 }), // 21
      o('OP_TYPE_AGGREGATE_GET', 'fmax', 'k1'), // 22
      o('OP_TYPE_TIMER_REGISTER', 't', 'k1', { timestamp: 10 }), // 23
      o('OP_TYPE_TIMER_REGISTER', 't', 'k2', { timestamp: 5 }), // 24
      o('OP_TYPE_TIMER_REGISTER', 't', 'k3', { timestamp: 20 }), // 25
      o('OP_TYPE_TIMER_DELETE', 't', 'k2', { timestamp: 5 }), // 26
      o('OP_TYPE_TIMER_REGISTER', 't', 'k2', { timestamp: 7 }), // 27
      { type: 'OP_TYPE_TIMER_POLL', state: 't', timestamp: 15 }, // 28
      { type: 'OP_TYPE_OPERATOR_SET', state: 'ol', values: [toBuffer('a')], operatorMode: 'OPERATOR_STATE_MODE_UNION' }, // 29
      { type: 'OP_TYPE_OPERATOR_APPEND', state: 'ol', values: [toBuffer('b')] }, // 30
      { type: 'OP_TYPE_OPERATOR_GET', state: 'ol' }, // 31
    ];
    const { results: r } = await inst.send(ops);
    for (const x of r) check(x.code === 0, `${kind}: operation ${x.index}: ${x.error}`);
    check(r[1].found && eqBuf(r[1].value, 'a'), `${kind}: GET after PUT`);
    check(!r[3].found, `${kind}: GET after DELETE found ${r[3].value}`);
    check(r[6].values.map(String).join() === 'x,y,z', `${kind}: LIST_GET ${r[6].values}`);
    check(r[9].found && eqBuf(r[9].value, 'v1'), `${kind}: MAP_GET`);
    check(r[10].found && !r[12].found, `${kind}: MAP_CONTAINS before/after remove`);
    check(r[13].entries.length === 1 && eqBuf(r[13].entries[0].userKey, 'u1') && !r[13].more, `${kind}: MAP_ITERATE`);
    check(r[16].found && r[16].numberType === 'NUMBER_TYPE_INT64' && r[16].intValue === -2, `${kind}: sum ${r[16].intValue}`);
    check(r[19].intValue === 2, `${kind}: count ${r[19].intValue}`);
    check(r[22].floatValue === 2.5, `${kind}: max ${r[22].floatValue}`);
    const polled = r[28].timers.map((t) => `${t.key}@${t.timestamp}`).join();
    check(polled === 'k2@7,k1@10', `${kind}: TIMER_POLL ${polled}`);
    check(r[31].found && r[31].values.map(String).join() === 'a,b' && r[31].operatorMode === 'OPERATOR_STATE_MODE_UNION',
      `${kind}: OPERATOR_GET ${r[31].values} ${r[31].operatorMode}`);
    // The timer polled is gone; the one above the watermark stays.
    const again = await inst.send([{ type: 'OP_TYPE_TIMER_POLL', state: 't', timestamp: 100 }]);
    check(again.results[0].timers.map((t) => `${t.key}@${t.timestamp}`).join() === 'k3@20', `${kind}: second poll`);
    await inst.closeInstance();
  }
}

// OPS-2: a timer is its key group, key, namespace and timestamp: registered
// twice, it fires once.
async function timerTwice(c) {
  const inst = await c.open(openSpec('timer-twice', 'BACKEND_KIND_FILE'));
  const reg = inst.op('OP_TYPE_TIMER_REGISTER', 't', 'k', { timestamp: 5 });
  const { results: r } = await inst.send([reg, reg, { type: 'OP_TYPE_TIMER_POLL', state: 't', timestamp: 10 }]);
  check(r[2].code === 0 && r[2].timers.length === 1 && !r[2].more, `poll: ${r[2].timers.length} timers, more ${r[2].more}`);
  await inst.closeInstance();
}

// OPS-3: a full TIMER_POLL page says more while due timers remain, on every
// backend; the client's pollTimers follows it.
async function timerPages(c) {
  for (const kind of ['BACKEND_KIND_HEAP', 'BACKEND_KIND_FILE', 'BACKEND_KIND_LSM']) {
    const inst = await c.open(openSpec(`timer-pages-${kind.toLowerCase().slice(13)}`, kind));
    const page = inst.open.maxPage;
    const register = async (n) => {
      const sent = [];
      for (let i = 0; i < n; i += 5000) {
        const ops = [];
        for (let j = i; j < Math.min(i + 5000, n); j++) ops.push(inst.op('OP_TYPE_TIMER_REGISTER', 't', `k${j}`, { timestamp: j }));
        sent.push(inst.send(ops));
      }
      for (const { results } of await Promise.all(sent)) for (const x of results) check(x.code === 0, `${kind}: register: ${x.error}`);
    };
    const poll = async (limit, n, more) => {
      const { results: [r] } = await inst.send([{ type: 'OP_TYPE_TIMER_POLL', state: 't', timestamp: 1e9, limit }]);
      check(r.code === 0 && r.timers.length === n && r.more === more,
        `${kind}: poll (limit ${limit}): ${r.timers.length} timers, more ${r.more}; want ${n}, more ${more} (${r.error})`);
    };
    await register(page + 5);
    await poll(0, page, true);
    await poll(0, 5, false);
    await poll(0, 0, false);
    await register(10);
    await poll(4, 4, true);
    await poll(4, 4, true);
    await poll(2, 2, false);
    await register(25);
    const all = await inst.pollTimers('t', 1e9, 10);
    check(all.length === 25, `${kind}: pollTimers drained ${all.length} of 25`);
    await inst.closeInstance();
  }
}

// OPS-4: MAP_ITERATE pages in user-key order, more on all but the last.
async function mapPages(c) {
  const inst = await c.open(openSpec('map-pages', 'BACKEND_KIND_LSM'));
  const ops = [];
  for (let i = 0; i < 25; i++) {
    ops.push(inst.op('OP_TYPE_MAP_PUT', 'm', 'k', { userKey: toBuffer(`u${String(i).padStart(2, '0')}`), value: toBuffer(String(i)) }));
  }
  await inst.send(ops);
  const sizes = [];
  const mores = [];
  const keys = [];
  let after = Buffer.alloc(0);
  for (let more = true; more;) {
    const { results: [r] } = await inst.send([inst.op('OP_TYPE_MAP_ITERATE', 'm', 'k', { userKey: after, limit: 10 })]);
    check(r.code === 0, `iterate: ${r.error}`);
    sizes.push(r.entries.length);
    mores.push(r.more);
    keys.push(...r.entries.map((e) => e.userKey.toString()));
    if (r.entries.length) after = r.entries[r.entries.length - 1].userKey;
    more = r.more;
  }
  check(sizes.join() === '10,10,5' && mores.join() === 'true,true,false', `pages ${sizes} more ${mores}`);
  check(keys.join() === [...keys].sort().join() && keys.length === 25, `user keys ${keys}`);
  await inst.closeInstance();
}

// SAV-1 and SAV-2: a savepoint is not ordered with the batch stream; the
// daemon refuses it unless the client says its batches were answered, and
// then it holds every write answered before it.
async function savepointWrites(c, job) {
  const inst = await c.open(openSpec(job, 'BACKEND_KIND_LSM'), { maxInFlight: 8 });
  const sent = [];
  for (let b = 0; b < 5; b++) sent.push(inst.send(putOps(inst, b * 1000, 1000, 'before')));
  return { inst, sent };
}

async function savepointRefused(c) {
  const { inst, sent } = await savepointWrites(c, 'sp-refused');
  await rejects('savepoint behind unanswered batches', c.triggerSavepoint('sp-refused'), status.FAILED_PRECONDITION, 'batches_answered');
  await Promise.all(sent);
  await inst.closeInstance();
}

async function savepointHolds(c) {
  const job = 'sp';
  const { inst, sent } = await savepointWrites(c, job);
  for (const { results } of await Promise.all(sent)) for (const x of results) check(x.code === 0, `put: ${x.error}`);
  await inst.drain();
  const sp = await c.triggerSavepoint(job, { checkpointId: 7, batchesAnswered: true });
  await inst.closeInstance();
  const re = await c.open(openSpec('sp-copy', 'BACKEND_KIND_FILE', { restore: { savepoint: sp.path } }));
  check(re.open.restoredCheckpointId === 7 && re.open.lastCompletedCheckpointId === 0,
    `restored ${re.open.restoredCheckpointId}, last completed ${re.open.lastCompletedCheckpointId}`);
  const keys = [];
  for (let i = 0; i < 5000; i++) keys.push(`k${i}`);
  const got = await readAll(re, keys);
  got.forEach((x, i) => check(x.found && eqBuf(x.value, 'before'), `savepoint: ${keys[i]} = ${x.value} (found ${x.found})`));
  await re.closeInstance();
}

// RST-3: an Open with replace that fails leaves the running instance open
// and working; one that succeeds closes it.
async function failedReplace(c) {
  const job = 'replace';
  const inst = await c.open(openSpec(job, 'BACKEND_KIND_FILE'));
  await inst.send([inst.op('OP_TYPE_PUT', 'v', 'a', { value: toBuffer('1') })]);
  await inst.snapshot(1);
  await c.completeCheckpoint(job, 1);
  await inst.send([inst.op('OP_TYPE_PUT', 'v', 'a', { value: toBuffer('2') })]);
  await rejects('replace at another max parallelism', c.call('Open', openSpec(job, 'BACKEND_KIND_FILE',
    { replace: true, maxParallelism: 256, restore: { latest: true } })), status.FAILED_PRECONDITION, 'maxParallelism');
  const [got] = await readAll(inst, ['a']);
  check(got.code === 0 && eqBuf(got.value, '2'), `after a failed replace: ${got.error || got.value}`);
  const re = await c.open(openSpec(job, 'BACKEND_KIND_FILE', { replace: true, restore: { latest: true } }));
  const [gone] = await readAll(inst, ['a']);
  expectCode('the replaced instance', gone, status.FAILED_PRECONDITION);
  inst.abandon();
  await re.closeInstance();
}

function putOps(inst, from, n, value) {
  const ops = new Array(n);
  for (let i = 0; i < n; i++) ops[i] = inst.op('OP_TYPE_PUT', 'v', `k${from + i}`, { value: toBuffer(value) });
  return ops;
}

async function readAll(inst, keys) {
  const ops = keys.map((k) => inst.op('OP_TYPE_GET', 'v', k));
  const { results } = await inst.send(ops);
  return results;
}

// CKP-1: Snapshots right after unacknowledged batches: a barrier holds every
// operation sent before it on the stream and none after.
async function barriers(c) {
  const job = 'order';
  const rounds = 10;
  const batches = 8;
  const per = 250;
  const inst = await c.open(openSpec(job, 'BACKEND_KIND_LSM'), { maxInFlight: 64 });
  const sent = [];
  for (let r = 1; r <= rounds; r++) {
    for (let b = 0; b < batches; b++) sent.push(inst.send(putOps(inst, b * per, per, String(r))));
    sent.push(inst.send([inst.op('OP_TYPE_PUT', 'v', 'last', { value: toBuffer(String(r)) })], { checkpointId: r }));
  }
  const resps = await Promise.all(sent);
  for (const resp of resps) {
    if (resp.snapshot) check(resp.snapshot.code === 0, `barrier: ${resp.snapshot.error}`);
  }
  check(resps.filter((x) => x.snapshot).length === rounds, 'barrier outcomes missing');
  await inst.closeInstance();
  for (let r = 1; r <= rounds; r++) await c.completeCheckpoint(job, r);
  // Completing twice is fine: a coordinator may retry.
  const again = await c.completeCheckpoint(job, rounds);
  check(again.checkpoint.state === 'CHECKPOINT_STATUS_COMPLETED', `second complete: ${again.checkpoint.state}`);
  const { checkpoints } = await c.listCheckpoints(job);
  const retained = checkpoints.filter((x) => x.retained);
  check(retained.length >= 2, `retained ${retained.length}`);
  const keys = ['last'];
  for (let i = 0; i < batches * per; i++) keys.push(`k${i}`);
  for (const ck of retained) {
    const re = await c.open(openSpec(job, 'BACKEND_KIND_LSM', {
      replace: true, restore: { checkpointId: ck.checkpointId, mode: 'RESTORE_MODE_NO_CLAIM' },
    }));
    check(re.open.restoredCheckpointId === ck.checkpointId, `restored ${re.open.restoredCheckpointId}`);
    const got = await readAll(re, keys);
    got.forEach((x, i) => check(x.found && eqBuf(x.value, String(ck.checkpointId)),
      `checkpoint ${ck.checkpointId}: ${keys[i]} = ${x.value} (found ${x.found})`));
    await re.closeInstance();
  }
  // A no-claim restore of the job's own checkpoint pins it.
  const after = await c.listCheckpoints(job);
  check(after.checkpoints.some((x) => x.pinned), 'no-claim restore pinned nothing');
}

// CKP-2: the unary Snapshot would miss requests in flight: it refuses unless
// told they were answered.
async function unarySnapshot(c) {
  const job = 'unary';
  const inst = await c.open(openSpec(job, 'BACKEND_KIND_HEAP'));
  inst.send(putOps(inst, 0, 100, 'x'));
  await rejects('unary Snapshot', c.call('Snapshot', { instanceId: inst.id, job, checkpointId: 1 }),
    status.FAILED_PRECONDITION, 'barrier');
  await inst.closeInstance();
}

// CKP-3: ids must grow past the last completed one; the refusal names both.
async function checkpointIds(c) {
  const job = 'ids';
  const inst = await c.open(openSpec(job, 'BACKEND_KIND_HEAP'));
  await inst.snapshot(10);
  await c.completeCheckpoint(job, 10);
  const late = await c.open(openSpec(job, 'BACKEND_KIND_HEAP', { replace: true }));
  check(late.open.lastCompletedCheckpointId === 10, `last completed ${late.open.lastCompletedCheckpointId}`);
  await rejects('old checkpoint id', late.snapshot(9), status.FAILED_PRECONDITION, 'checkpoint 9', 'completed checkpoint 10');
  await late.closeInstance();
}

// RST-1: latest of a job that never completed a checkpoint.
async function restoreNewJob(c) {
  await rejects('restore latest of a new job', c.open(openSpec('brand-new', 'BACKEND_KIND_FILE', { restore: { latest: true } })),
    status.NOT_FOUND);
}

// RST-2: claim, abort reasons, waited snapshots.
async function restores(c) {
  const inst = await c.open(openSpec('claim', 'BACKEND_KIND_FILE'));
  await inst.send(putOps(inst, 0, 10, 'one'));
  await inst.snapshot(1, true);
  await c.completeCheckpoint('claim', 1);
  await inst.send(putOps(inst, 0, 10, 'two'));
  const snap = await inst.snapshot(2, true);
  check(snap.files > 0 && snap.fullSize > 0, `waited snapshot sizes: ${JSON.stringify(snap)}`);
  // Abort with an enum reason: the checkpoint is declined, the text kept.
  await c.abortCheckpoint('claim', 2, 'ABORT_REASON_DECLINED', 'disk full');
  const list = await c.listCheckpoints('claim');
  const two = list.checkpoints.find((x) => x.checkpointId === 2);
  check(two && two.state === 'CHECKPOINT_STATUS_DECLINED' && two.reason.includes('disk full'), `aborted: ${JSON.stringify(two)}`);
  const re = await c.open(openSpec('claim', 'BACKEND_KIND_FILE', { replace: true, restore: { latest: true, mode: 'RESTORE_MODE_CLAIM' } }));
  check(re.open.restoredCheckpointId === 1, `restored ${re.open.restoredCheckpointId}`);
  const got = await readAll(re, ['k0', 'k9']);
  check(got.every((x) => eqBuf(x.value, 'one')), 'claim restore: values');
  await re.closeInstance();
}

// CHS-1: unaligned checkpoints: each subtask's in-flight buffers written before its
// barrier, the statistics reported with it, the buffers read back after a
// restore, and keyed records handed to their key group's owner on a rescale.
async function channelState(c) {
  const job = 'unaligned';
  const spec = (sub, par, extra = {}) => ({ task: { job, operator: 'win', subtask: sub }, parallelism: par,
    backendKind: 'BACKEND_KIND_FILE', states: [{ name: 'v', kind: 'STATE_KIND_VALUE' }], replace: true, ...extra });
  const written = [];
  const ins = [];
  for (let sub = 0; sub < 2; sub++) {
    const inst = await c.open(spec(sub, 2));
    ins.push(inst);
    const records = [];
    for (let i = 0; i < 40; i++) {
      const key = Buffer.from(`in-flight-${sub}-${i}`);
      // An input channel of a keyed connection holds records of the
      // subtask's own key groups; take the keys that land here.
      const kg = keyGroup(key, inst.maxParallelism);
      if (kg >= inst.keyGroups.start && kg <= inst.keyGroups.end) records.push({ keyGroup: kg, data: key });
    }
    written.push(...records.map((r) => r.data.toString()));
    const chunk = { channel: { direction: 'CHANNEL_DIRECTION_INPUT', gate: 0, index: 0 }, kind: 'CHANNEL_KIND_KEYED',
      buffers: [{ records: records.slice(0, 5) }, { records: records.slice(5) }] };
    const resp = await inst.writeChannelState(1, [chunk]);
    check(Number(resp.records) === records.length, `write channel state: ${JSON.stringify(resp)}`);
    await inst.snapshot(1, false, { unaligned: true, alignmentMicros: 0, startDelayMicros: 5000 });
  }
  await rejects('channel state after the snapshot', ins[0].writeChannelState(1, []), status.FAILED_PRECONDITION);
  const info = (await c.completeCheckpoint(job, 1)).checkpoint;
  check(info.unaligned && Number(info.persistedInFlightBytes) > 0 && Number(info.startDelayMicros) === 5000,
    `checkpoint statistics: ${JSON.stringify(info)}`);
  for (const inst of ins) await inst.closeInstance();
  // Rescale 2 -> 3: every record comes back once, at its key group's owner.
  const got = [];
  for (let sub = 0; sub < 3; sub++) {
    const inst = await c.open(spec(sub, 3, { restore: { latest: true } }));
    for (const ch of await inst.readChannelState()) {
      check(ch.kind === 'CHANNEL_KIND_KEYED', `restored channel kind ${ch.kind}`);
      for (const b of ch.buffers) {
        for (const r of b.records) {
          check(r.keyGroup >= inst.keyGroups.start && r.keyGroup <= inst.keyGroups.end,
            `subtask ${sub} got key group ${r.keyGroup} outside ${JSON.stringify(inst.keyGroups)}`);
          check(keyGroup(r.data, inst.maxParallelism) === r.keyGroup, `record ${r.data} carries another key group`);
          got.push(r.data.toString());
        }
      }
    }
    await inst.closeInstance();
  }
  got.sort();
  written.sort();
  check(JSON.stringify(got) === JSON.stringify(written), `rescaled channel state: ${got.length} records, want ${written.length}`);
}

// XC-1: State written by the Go client, read here, and the other way round.
async function crossCheck(c, d, xcheck) {
  execFileSync(xcheck, ['write', d.sock, 'xgo', 'go'], { stdio: 'inherit' });
  const inst = await c.open(openSpec('xgo', 'BACKEND_KIND_FILE', { replace: true, restore: { latest: true } }));
  const ops = [];
  for (let i = 0; i < 50; i++) {
    const k = `x${i}`;
    ops.push(inst.op('OP_TYPE_GET', 'v', k), inst.op('OP_TYPE_LIST_GET', 'l', k),
      inst.op('OP_TYPE_MAP_GET', 'm', k, { userKey: toBuffer('u') }), inst.op('OP_TYPE_AGGREGATE_GET', 'sum', k));
  }
  ops.push({ type: 'OP_TYPE_TIMER_POLL', state: 't', timestamp: 1050 }, { type: 'OP_TYPE_OPERATOR_GET', state: 'ops' });
  const { results: r } = await inst.send(ops);
  for (let i = 0; i < 50; i++) {
    const [v, l, m, s] = r.slice(4 * i, 4 * i + 4);
    check(eqBuf(v.value, `go-${i}`), `xgo v[x${i}] = ${v.value}`);
    check(l.values.map(String).join() === `go,${i}`, `xgo l[x${i}] = ${l.values}`);
    check(eqBuf(m.value, 'go'), `xgo m[x${i}] = ${m.value}`);
    check(s.intValue === i + 1, `xgo sum[x${i}] = ${s.intValue}`);
  }
  check(r[200].timers.length === 50, `xgo timers: ${r[200].timers.length}`);
  check(r[201].values.map(String).join() === 'go', `xgo operator list ${r[201].values}`);
  await inst.closeInstance();

  // The same data set, written here for Go to read.
  const w = await c.open({ ...openSpec('xnode', 'BACKEND_KIND_FILE', { replace: true }), states: ALL_STATES.filter((s) => ['v', 'l', 'm', 'sum', 't'].includes(s.name)) });
  const wops = [];
  for (let i = 0; i < 50; i++) {
    const k = `x${i}`;
    wops.push(w.op('OP_TYPE_PUT', 'v', k, { value: toBuffer(`node-${i}`) }),
      w.op('OP_TYPE_LIST_APPEND', 'l', k, { values: [toBuffer('node'), toBuffer(String(i))] }),
      w.op('OP_TYPE_MAP_PUT', 'm', k, { userKey: toBuffer('u'), value: toBuffer('node') }),
      w.op('OP_TYPE_AGGREGATE_ADD', 'sum', k, { numberType: 'NUMBER_TYPE_INT64', intValue: i + 1 }),
      w.op('OP_TYPE_TIMER_REGISTER', 't', k, { timestamp: 1000 + i }));
  }
  wops.push({ type: 'OP_TYPE_OPERATOR_SET', state: 'ops', values: [toBuffer('node')], operatorMode: 'OPERATOR_STATE_MODE_SPLIT' });
  const sent = w.send(wops);
  await w.snapshot(1);
  for (const x of (await sent).results) check(x.code === 0, `xnode write: ${x.error}`);
  await c.completeCheckpoint('xnode', 1);
  await w.closeInstance();
  execFileSync(xcheck, ['read', d.sock, 'xnode', 'node'], { stdio: 'inherit' });
}

// ERR-1: bad operations get clear errors, and nothing else breaks.
async function badInput(c) {
  const spec = { task: { job: 'bad', operator: 'op', subtask: 0 }, parallelism: 2, backendKind: 'BACKEND_KIND_HEAP', states: ALL_STATES,
    keyHash: 'KEY_HASH_FNV1A_MURMUR' };
  const inst = await c.open(spec);
  check(inst.open.keyHash === 'KEY_HASH_FNV1A_MURMUR', `open: key hash ${inst.open.keyHash}`);
  // A key group in the range that is not the key's: refused, since the hash
  // was declared.
  let inside = 0;
  while (keyGroup(Buffer.from(`i${inside}`), inst.maxParallelism) === inst.keyGroups.start) inside++;
  const misrouted = { ...inst.op('OP_TYPE_PUT', 'v', `i${inside}`, { value: toBuffer('x') }), keyGroup: inst.keyGroups.start };
  let own = 0;
  while (keyGroup(Buffer.from(`i${own}`), inst.maxParallelism) > inst.keyGroups.end) own++;
  let outside = 0;
  while (keyGroup(Buffer.from(`o${outside}`), inst.maxParallelism) <= inst.keyGroups.end) outside++;
  const big = Buffer.alloc(inst.open.maxValueSize + 1);
  const { results: r } = await inst.send([
    inst.op('OP_TYPE_PUT', 'v', `o${outside}`, { value: toBuffer('x') }),
    { ...inst.op('OP_TYPE_PUT', 'v', 'k', { value: toBuffer('x') }), keyGroup: inst.maxParallelism },
    inst.op('OP_TYPE_AGGREGATE_ADD', 'sum', `i${own}`, { intValue: 1 }),
    inst.op('OP_TYPE_PUT', 'nope', 'k', { value: toBuffer('x') }),
    inst.op('OP_TYPE_LIST_GET', 'v', 'k'),
    inst.op('OP_TYPE_AGGREGATE_ADD', 'sum', 'k', { numberType: 'NUMBER_TYPE_FLOAT64', floatValue: 1 }),
    inst.op('OP_TYPE_PUT', 'v', 'k', { value: big }),
    { type: 'OP_TYPE_UNSPECIFIED', state: 'v', key: toBuffer('k') },
    inst.op('OP_TYPE_PUT', 'v', 'fine', { value: toBuffer('ok') }),
    misrouted,
  ]);
  expectCode('key group outside the range', r[0], status.INVALID_ARGUMENT, 'outside this instance\'s range');
  expectCode('key group at max parallelism', r[1], status.INVALID_ARGUMENT, 'out of range');
  expectCode('aggregate add without number type', r[2], status.INVALID_ARGUMENT, 'number_type', 'NUMBER_TYPE_INT64');
  r.splice(1, 2);
  expectCode('unknown state', r[1], status.INVALID_ARGUMENT, '"nope"');
  expectCode('wrong state kind', r[2], status.INVALID_ARGUMENT, '"v"');
  expectCode('wrong number type', r[3], status.INVALID_ARGUMENT, '"sum"');
  expectCode('value too large', r[4], status.RESOURCE_EXHAUSTED);
  expectCode('unknown operation type', r[5], status.INVALID_ARGUMENT);
  check(r[6].code === 0, `a good operation after bad ones: ${r[6].error}`);
  expectCode('key group not the key\'s', r[7], status.INVALID_ARGUMENT, 'not the key\'s');
  const many = await inst.send(putOps(inst, 0, inst.open.maxBatchOps + 1, 'x'));
  expectCode('too many operations', many.results[0], status.RESOURCE_EXHAUSTED, String(inst.open.maxBatchOps));
  await rejects('checkpoint id 0', inst.snapshot(0), status.INVALID_ARGUMENT, 'id 0');
  // The stream is still usable, and holds the good write.
  const after = await readAll(inst, ['fine']);
  check(eqBuf(after[0].value, 'ok'), 'the stream broke on bad input');
  await inst.closeInstance();
}

const BAD_SPEC = { task: { job: 'bad', operator: 'op', subtask: 0 }, parallelism: 2, backendKind: 'BACKEND_KIND_HEAP', states: ALL_STATES,
  keyHash: 'KEY_HASH_FNV1A_MURMUR' };

// ERR-2: bad Open requests.
async function badOpen(c) {
  const spec = { ...BAD_SPEC, task: { job: 'bad-open', operator: 'op', subtask: 0 } };
  const inst = await c.open(spec);
  await rejects('open twice', c.open(spec), status.FAILED_PRECONDITION);
  await rejects('open without task', c.call('Open', { parallelism: 1, backendKind: 'BACKEND_KIND_HEAP' }), status.INVALID_ARGUMENT, 'task');
  await rejects('unknown backend', c.call('Open', { ...spec, task: { job: 'bad', operator: 'op2' }, backendKind: undefined, backend: 'rocks' }),
    status.INVALID_ARGUMENT, 'rocks');
  await rejects('backend fields disagree', c.call('Open', { ...spec, task: { job: 'bad', operator: 'op3' }, backend: 'lsm' }),
    status.INVALID_ARGUMENT, 'different backends');
  await rejects('max parallelism out of range', c.call('Open', { ...spec, task: { job: 'bad', operator: 'op4' }, maxParallelism: 1 << 20 }),
    status.INVALID_ARGUMENT);
  await rejects('no backend', c.call('Open', { ...spec, task: { job: 'bad', operator: 'op5' }, backendKind: undefined }),
    status.INVALID_ARGUMENT, 'backend_kind');
  await rejects('a state with no kind', c.call('Open', { ...spec, task: { job: 'bad', operator: 'op6' }, states: [{ name: 's' }] }),
    status.INVALID_ARGUMENT, 'has no kind');
  await inst.closeInstance();
}

// ERR-3: unknown and foreign instances.
async function badInstances(c) {
  const inst = await c.open({ ...BAD_SPEC, task: { job: 'bad', operator: 'op', subtask: 1 } });
  const unknownId = Buffer.alloc(16, 7);
  await rejects('close unknown instance', c.call('CloseInstance', { instanceId: unknownId, job: 'bad' }), status.NOT_FOUND);
  await rejects('another job', c.call('CloseInstance', { instanceId: inst.id, job: 'other' }), status.PERMISSION_DENIED);
  // A stream naming an unknown instance ends with NOT_FOUND.
  const ghost = await (async () => {
    const g = new (require('./stated').Instance)(c, { job: 'bad' }, { instanceId: unknownId, maxParallelism: 128 });
    try {
      await g.start();
    } catch (err) {
      return err;
    }
    return null;
  })();
  expectCode('batch on an unknown instance', ghost, status.NOT_FOUND);
  await inst.closeInstance();
}

// RST-4: Kill the daemon after a barrier right behind unacknowledged writes;
// the restarted daemon restores it.
async function restart(c, d) {
  const job = 'restart';
  const inst = await c.open(openSpec(job, 'BACKEND_KIND_FILE'));
  const sent = [];
  for (let b = 0; b < 4; b++) sent.push(inst.send(putOps(inst, b * 250, 250, 'before')));
  const snap = inst.snapshot(1);
  sent.push(inst.send(putOps(inst, 0, 1000, 'after')));
  await Promise.all(sent);
  await snap;
  await c.completeCheckpoint(job, 1);
  c.close();
  await d.kill();
  await d.start();
  const c2 = new Client(`unix://${d.sock}`);
  const re = await c2.open(openSpec(job, 'BACKEND_KIND_FILE', { restore: { latest: true } }));
  check(re.open.restoredCheckpointId === 1, `restored ${re.open.restoredCheckpointId} after restart`);
  check(re.open.lastCompletedCheckpointId === 1, `last completed ${re.open.lastCompletedCheckpointId} after restart`);
  const keys = [];
  for (let i = 0; i < 1000; i++) keys.push(`k${i}`);
  const got = await readAll(re, keys);
  got.forEach((x, i) => check(eqBuf(x.value, 'before'), `after restart ${keys[i]} = ${x.value}`));
  await re.send(putOps(re, 0, 10, 'again'));
  await re.snapshot(2);
  await c2.completeCheckpoint(job, 2);
  await re.closeInstance();
  return c2;
}

// --bench: batched puts then gets of 100-byte values, one instance on the
// file backend, batches of 1000 operations, up to 8 in flight; then the Go
// client's figures on the same daemon: the same loop (xcheck bench), and
// stated bench's value-put and value-get (random keys, latency recorded).
async function bench(c, d, args) {
  const n = args.benchKeys;
  const inst = await c.open(openSpec('bench', 'BACKEND_KIND_FILE', { replace: true }), { maxInFlight: 8 });
  const value = Buffer.alloc(100, 'v');
  const batch = 1000;
  const keys = new Array(n);
  for (let i = 0; i < n; i++) keys[i] = Buffer.from(`key-${i}`);
  const run = async (mk) => {
    const t0 = process.hrtime.bigint();
    const inflight = [];
    for (let i = 0; i < n; i += batch) {
      const ops = [];
      for (let j = i; j < Math.min(i + batch, n); j++) ops.push(mk(keys[j]));
      inflight.push(inst.send(ops));
      if (inflight.length >= 64) await inflight.shift();
    }
    const rs = await Promise.all(inflight);
    for (const r of rs) for (const x of r.results) if (x.code !== 0) throw new Failure(x.error);
    return n / (Number(process.hrtime.bigint() - t0) / 1e9);
  };
  const puts = await run((k) => ({ type: 'OP_TYPE_PUT', state: 'v', key: k, keyGroup: keyGroup(k, inst.maxParallelism), value }));
  const gets = await run((k) => ({ type: 'OP_TYPE_GET', state: 'v', key: k, keyGroup: keyGroup(k, inst.maxParallelism) }));
  console.log(`bench node: ${n} keys, batches of ${batch}, 8 in flight, 100-byte values: ` +
    `put ${Math.round(puts / 1000)}k ops/s, get ${Math.round(gets / 1000)}k ops/s`);
  await inst.closeInstance();
  const same = execFileSync(args.xcheck, ['bench', d.sock, 'bench-go', String(n)], { encoding: 'utf8' }).trim();
  console.log(`bench go (xcheck bench, the same loop): ${same}`);
  for (const workload of ['value-put', 'value-get']) {
    const bargs = ['bench', 'run', '--socket', d.sock, '--workload', workload, '--backend', 'file', '--keys', String(n),
      '--value-size', '100', '--batch', String(batch), '--in-flight', String(8 * batch), '--duration', '3s', '--warmup', '1s',
      '--rescale-to', '-1'];
    const out = execFileSync(args.stated, bargs, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    const line = out.split('\n').find((l) => /^run\.(put|get)\.ops_per_sec/.test(l));
    console.log(`bench go (stated ${bargs.join(' ')}): ${line ? line.replace(/\s+/g, ' ') : out}`);
  }
}

// CASES are the cases of docs/conformance.md, by id, in the order they run.
// A case gets {c, d, args}; one that replaces the client sets ctx.c.
const CASES = [
  ['KG-1', 'key-group vectors', () => keyGroupVectors()],
  ['OPS-1', 'every state kind on every backend', ({ c }) => stateKinds(c)],
  ['OPS-2', 'a timer registered twice is one', ({ c }) => timerTwice(c)],
  ['OPS-3', 'a full TIMER_POLL page says more', ({ c }) => timerPages(c)],
  ['OPS-4', 'MAP_ITERATE pages', ({ c }) => mapPages(c)],
  ['CKP-1', 'barriers after unanswered batches', ({ c }) => barriers(c)],
  ['CKP-2', 'the unary Snapshot refuses without batches_answered', ({ c }) => unarySnapshot(c)],
  ['CKP-3', 'checkpoint ids must grow', ({ c }) => checkpointIds(c)],
  ['SAV-1', 'a savepoint behind unanswered batches is refused', ({ c }) => savepointRefused(c)],
  ['SAV-2', 'a savepoint holds every answered write', ({ c }) => savepointHolds(c)],
  ['RST-1', 'latest of a new job', ({ c }) => restoreNewJob(c)],
  ['RST-2', 'claim, abort reasons, waited snapshots', ({ c }) => restores(c)],
  ['RST-3', 'a failed replace leaves the running instance', ({ c }) => failedReplace(c)],
  ['CHS-1', 'channel state across a rescale 2 -> 3', ({ c }) => channelState(c)],
  ['XC-1', 'state the reference client wrote, and the other way round', ({ c, d, args }) => crossCheck(c, d, args.xcheck)],
  ['ERR-1', 'bad operations fail alone', ({ c }) => badInput(c)],
  ['ERR-2', 'bad Open requests', ({ c }) => badOpen(c)],
  ['ERR-3', 'unknown and foreign instances', ({ c }) => badInstances(c)],
  // Last: it restarts the daemon.
  ['RST-4', 'kill and restart', async (ctx) => { ctx.c = await restart(ctx.c, ctx.d); }],
];

// documentedIds reads the case ids of docs/conformance.md ("**ID title.**").
function documentedIds() {
  const doc = fs.readFileSync(path.join(__dirname, '..', '..', 'docs', 'conformance.md'), 'utf8');
  return [...doc.matchAll(/^\*\*([A-Z]+-\d+) /gm)].map((m) => m[1]);
}

async function main() {
  const args = parseArgs();
  const t0 = Date.now();
  const documented = documentedIds();
  const ids = CASES.map(([id]) => id);
  const undocumented = ids.filter((id) => !documented.includes(id));
  const unimplemented = documented.filter((id) => !ids.includes(id));
  if (undocumented.length || unimplemented.length || documented.length !== new Set(documented).size) {
    console.error(`FAIL docs/conformance.md and conformance.js disagree: not documented ${undocumented}, not implemented ${unimplemented}`);
    process.exit(1);
  }
  const unknown = (args.only || []).filter((id) => !ids.includes(id));
  if (unknown.length) {
    console.error(`FAIL --only names unknown cases ${unknown}`);
    process.exit(1);
  }
  const run = CASES.filter(([id]) => !args.only || args.only.includes(id));
  const d = new Daemon(args.stated);
  let ok = false;
  try {
    await d.start();
    const ctx = { c: new Client(`unix://${d.sock}`), d, args };
    for (const [id, title, fn] of run) {
      const t = Date.now();
      try {
        await fn(ctx);
      } catch (err) {
        err.caseId = id;
        throw err;
      }
      console.log(`ok   ${id} ${title} (${Date.now() - t} ms)`);
    }
    if (args.bench) await bench(ctx.c, d, args);
    ctx.c.close();
    ok = true;
  } catch (err) {
    console.error(`FAIL ${err.caseId || ''} ${err instanceof Failure ? '' : '(unexpected) '}${err.stack || err}`);
    if (err instanceof StatedError) console.error(`     code ${err.codeName}`);
    console.error(`daemon log:\n${d.tail()}`);
  } finally {
    await d.stop().catch(() => {});
  }
  if (!ok) process.exit(1);
  console.log(`conformance passed: ${run.length} of ${CASES.length} cases in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
}

main();

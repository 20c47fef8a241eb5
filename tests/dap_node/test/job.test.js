// A torchrun job's debug adapter (dynstep/remote/job.py), driven by Microsoft's DebugClient: two CPU ranks
// (gloo) of tests/dist/job.py under `dynstep run --dap PORT --wait --ranks all -m torch.distributed.run`; one
// session, one thread per rank, both ranks stopped at once and each inspected, changed and continued.
'use strict';
const { describe, it } = require('node:test');
const assert = require('assert');
const fs = require('fs');
const net = require('net');
const os = require('os');
const path = require('path');
const cp = require('child_process');
const { DebugClient } = require('@vscode/debugadapter-testsupport');

const ROOT = path.resolve(__dirname, '..', '..', '..');
const PYTHON = process.env.PYTHON || 'python3';
const JOB = path.join(ROOT, 'tests', 'dist', 'job.py');

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.listen(0, '127.0.0.1', () => { const { port } = srv.address(); srv.close(() => resolve(port)); });
    srv.on('error', reject);
  });
}

// Start the job; resolve with {proc, port, exit} once the job's adapter listens.
function startJob(port, out) {
  return new Promise((resolve, reject) => {
    const env = { ...process.env, NO_COLOR: '1', TERM: 'dumb', OMP_NUM_THREADS: '1', PYTHONWARNINGS: 'ignore',
                  DYNSTEP_NATIVE: '0', TORCH_CPP_LOG_LEVEL: 'ERROR', PYTHONPATH: ROOT };
    const proc = cp.spawn(PYTHON, ['-m', 'dynstep', 'run', '--dap', String(port), '--wait', '--ranks', 'all',
                                   '--pause', 'module:layers.1', '-m', 'torch.distributed.run', '--nproc-per-node', '2',
                                   '--standalone', JOB, '--out', out], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    const exit = new Promise(res => proc.on('exit', code => res(code)));
    let err = '';
    proc.stderr.on('data', d => {
      err += d;
      if (/the job's debug adapter listens on/.test(err)) resolve({ proc, exit });
    });
    proc.on('error', reject);
    exit.then(code => reject(new Error(`job exited early (${code}):\n${err}`)));
  });
}

function within(ms, promise, what) {
  let timer;
  const timeout = new Promise((_, rej) => { timer = setTimeout(() => rej(new Error(`timeout: ${what}`)), ms); });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function nStops(stops, n, ms) {
  const deadline = Date.now() + ms;
  while (stops.length < n) {
    if (Date.now() > deadline) throw new Error(`timeout: ${n} stops, got ${stops.length}`);
    await new Promise(r => setTimeout(r, 50));
  }
  return stops.splice(0, n);
}

describe('the job\'s debug adapter, driven by Microsoft\'s DebugClient', () => {
  it('shows each rank as a thread and answers both ranks stopped at once', async () => {
    let port = await freePort();
    for (let i = 0; i < 20 && port > 65000; i++) port = await freePort();
    const out = fs.mkdtempSync(path.join(os.tmpdir(), 'dynstep-job-'));
    const job = await startJob(port, out);
    const dc = new DebugClient('unused', 'unused', 'dynstep');
    const stops = [];
    try {
      await dc.start(port);
      dc.on('stopped', e => stops.push(e.body));
      const initialized = dc.waitForEvent('initialized');
      await dc.initializeRequest();
      await dc.attachRequest({ name: 'dynstep: the job', type: 'dynstep', request: 'attach' });
      await within(10000, initialized, 'initialized');
      await dc.configurationDoneRequest();
      for (let step = 0; step < 2; step++) {
        const both = await nStops(stops, 2, 120000);
        const threads = (await dc.threadsRequest()).body.threads;
        assert.deepStrictEqual(threads.map(t => t.name).sort(), ['rank 0 · MainThread', 'rank 1 · MainThread']);
        assert.deepStrictEqual(both.map(s => s.threadId).sort(), threads.map(t => t.id).sort());
        for (const st of both) {
          const rank = threads.find(t => t.id === st.threadId).name.split(' · ')[0];
          assert.ok(st.description.startsWith(rank + ': '), st.description);
          const frames = (await dc.stackTraceRequest({ threadId: st.threadId })).body.stackFrames;
          assert.match(frames[0].name, /^x_3 = /);
          const src = await dc.sourceRequest({ source: frames[0].source, sourceReference: frames[0].source.sourceReference });
          assert.match(src.body.content, /x_3 = /);
          const node = (await dc.scopesRequest({ frameId: frames[0].id })).body.scopes[0].variablesReference;
          const value = (await dc.variablesRequest({ variablesReference: node })).body.variables.find(v => v.name === 'value');
          assert.match(value.value, /^f32\[3, 6, 16\] cpu/);
          if (rank === 'rank 1' && step === 0) {
            const set = await dc.setVariableRequest({ variablesReference: node, name: 'value', value: 'value * 0' });
            assert.match(set.body.value, /min -?0 {2}max -?0 /);
          }
          const ranks = await dc.evaluateRequest({ expression: 'ranks', frameId: frames[0].id, context: 'repl' });
          assert.match(ranks.body.result, /rank 0: paused/);
        }
        for (const st of both) await dc.continueRequest({ threadId: st.threadId });
      }
      const exited = await within(120000, dc.waitForEvent('exited'), 'exited');
      assert.strictEqual(exited.body.exitCode, 0);
      await within(10000, dc.stop(), 'disconnect');
      assert.strictEqual(await within(60000, job.exit, 'job exit'), 0);
      const losses = [0, 1].map(r => JSON.parse(fs.readFileSync(path.join(out, `rank${r}.json`))).losses);
      assert.strictEqual(losses[0].length, 2);
      assert.notStrictEqual(losses[1][0], losses[0][0]);
    } finally {
      if (job.proc.exitCode === null) job.proc.kill();
      fs.rmSync(out, { recursive: true, force: true });
    }
  });
});

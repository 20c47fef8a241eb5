// A torchrun job's debug adapter (dynstep/dap/job.py), driven by Microsoft's DebugClient: two CPU ranks
// (gloo) of tests/jobs/job.py under `dynstep run --dap PORT --wait --ranks all -m torch.distributed.run`; one
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
const JOB = path.join(ROOT, 'tests', 'jobs', 'job.py');

function isFree(port) {
  return new Promise(resolve => {
    const srv = net.createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

// PORT, PORT+1, PORT+2 free (the job's adapter, one per rank), below the kernel's ephemeral range, so that
// the job's own outgoing sockets (torchrun's store, gloo) cannot take them while it starts.
async function freePorts() {
  let low = 32768;
  try { low = Number(fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').split(/\s+/)[0]); } catch (e) {}
  for (let i = 0; i < 200; i++) {
    const port = Math.max(1024, low - 12000) + Math.floor(Math.random() * 11000);
    if (await isFree(port) && await isFree(port + 1) && await isFree(port + 2)) return port;
  }
  throw new Error('no run of three free ports');
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
    const job = { proc, exit, err: '' };
    proc.stdout.on('data', d => { job.err += d; });
    proc.stderr.on('data', d => {
      job.err += d;
      if (/the job's debug adapter listens on/.test(job.err)) resolve(job);
    });
    proc.on('error', reject);
    exit.then(code => reject(new Error(`job exited early (${code}):\n${job.err}`)));
  });
}

function within(ms, promise, what) {
  let timer;
  const timeout = new Promise((_, rej) => { timer = setTimeout(() => rej(new Error(`timeout: ${what}`)), ms); });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function nStops(stops, n, ms, job) {
  const deadline = Date.now() + ms;
  while (stops.length < n) {
    if (Date.now() > deadline || job.proc.exitCode !== null) {
      throw new Error(`timeout: ${n} stops, got ${stops.length}; the job's output:\n${job.err.slice(-4000)}`);
    }
    await new Promise(r => setTimeout(r, 50));
  }
  return stops.splice(0, n);
}

describe('the job\'s debug adapter, driven by Microsoft\'s DebugClient', () => {
  it('shows each rank as a thread and answers both ranks stopped at once', async () => {
    const port = await freePorts();
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
        const both = await nStops(stops, 2, 120000, job);
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

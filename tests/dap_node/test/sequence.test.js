// The DAP session of tests/dap/test_sequence.py, driven by a client nobody here wrote: Microsoft's
// DebugClient (@vscode/debugadapter-testsupport), against `dynstep run --dap 0 --wait` on a transformer
// block compiled by Inductor on CPU.
//   npm ci && PYTHON=/path/to/venv/python node --test --test-concurrency=1 --test-timeout=300000 test/
// tests/dap/test_node_client.py runs it (and skips when node, npm or node_modules are missing).
'use strict';
const { describe, it } = require('node:test');
const assert = require('assert');
const path = require('path');
const cp = require('child_process');
const { DebugClient } = require('@vscode/debugadapter-testsupport');

const ROOT = path.resolve(__dirname, '..', '..', '..');
const PYTHON = process.env.PYTHON || 'python3';
const MODEL = path.join(ROOT, 'tests', 'dap', 'block_model.py');
const LN_LINE = 30, ATTN_LINE = 36, X_LINE = 37;

// Start the debuggee; resolve with {proc, port, exit} once its server listens.
function startProgram() {
  return new Promise((resolve, reject) => {
    const env = { ...process.env, NO_COLOR: '1', TERM: 'dumb' };
    const proc = cp.spawn(PYTHON, ['-m', 'dynstep', 'run', '--dap', '0', '--wait', MODEL, '3', '3'],
                          { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    const exit = new Promise(res => proc.on('exit', code => res(code)));
    let err = '';
    proc.stderr.on('data', d => {
      err += d;
      const m = /debug adapter listening on [\d.]+:(\d+)/.exec(err);
      if (m) resolve({ proc, port: Number(m[1]), exit });
    });
    proc.on('error', reject);
    exit.then(code => reject(new Error(`program exited early (${code}):\n${err}`)));
  });
}

// DebugClient connected to a port disables its own timeouts: bound every wait.
function within(ms, promise, what) {
  let timer;
  const timeout = new Promise((_, rej) => { timer = setTimeout(() => rej(new Error(`timeout: ${what}`)), ms); });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function configure(dc, outputs, changed) {
  dc.on('output', e => outputs.push(e.body.output));
  dc.on('breakpoint', e => changed.push(e.body.breakpoint));
  const initialized = dc.waitForEvent('initialized');           // armed before the request that triggers it
  const init = await dc.initializeRequest();
  assert.ok(init.body.supportsConfigurationDoneRequest && init.body.supportsLogPoints && init.body.supportsSetVariable);
  await dc.attachRequest({ name: 'dynstep: attach', type: 'dynstep', request: 'attach' });
  await within(10000, initialized, 'initialized');
  const bps = await dc.setBreakpointsRequest({ source: { path: MODEL }, breakpoints: [
    { line: ATTN_LINE }, { line: LN_LINE, logMessage: 'h absmax={value.abs().max():.3f}' }] });
  assert.deepStrictEqual(bps.body.breakpoints.map(b => b.verified), [false, false]);
  const fbps = await dc.setFunctionBreakpointsRequest({ breakpoints: [{ name: 'module:mlp' }, { name: 'op:' }] });
  assert.strictEqual(fbps.body.breakpoints[1].verified, false);
  assert.match(fbps.body.breakpoints[1].message, /selector/);
}

async function inspectAndInject(dc, threadId) {
  const frames = (await dc.stackTraceRequest({ threadId })).body.stackFrames;
  const [graph, user] = frames;
  assert.ok(graph.source.sourceReference > 0);
  assert.strictEqual(user.source.path, MODEL);
  assert.strictEqual(user.line, ATTN_LINE);
  const src = await dc.sourceRequest({ source: graph.source, sourceReference: graph.source.sourceReference });
  assert.match(src.body.content.split('\n')[graph.line - 1], /^attn = torch\.nn\.functional\.linear/);
  const scopes = (await dc.scopesRequest({ frameId: graph.id })).body.scopes;
  const node = scopes[0].variablesReference;
  const value = (await dc.variablesRequest({ variablesReference: node })).body.variables.find(v => v.name === 'value');
  assert.match(value.value, /^f32\[2, 8, 16\] cpu/);
  assert.strictEqual(value.indexedVariables, 2);
  const page = await dc.variablesRequest({ variablesReference: value.variablesReference, filter: 'indexed', start: 1, count: 1 });
  assert.deepStrictEqual(page.body.variables.map(v => [v.name, v.evaluateName]), [['[1]', 'value[1]']]);
  const ev = await dc.evaluateRequest({ expression: 'value.shape', frameId: graph.id, context: 'watch' });
  assert.strictEqual(ev.body.result, 'torch.Size([2, 8, 16])');
  await assert.rejects(dc.setVariableRequest({ variablesReference: node, name: 'value', value: 'torch.ones(3)' }), /shape \[3\]/);
  const set = await dc.setVariableRequest({ variablesReference: node, name: 'value', value: 'value * 0' });
  assert.match(set.body.value, /max 0/);
}

describe('dynstep DAP server, driven by Microsoft\'s DebugClient', () => {
  it('runs the whole session on an Inductor-compiled transformer block', async () => {
    const prog = await startProgram();
    const dc = new DebugClient('unused', 'unused', 'dynstep');
    const outputs = [], changed = [];
    try {
      await dc.start(prog.port);
      await configure(dc, outputs, changed);
      let stopped = dc.waitForEvent('stopped');
      await dc.configurationDoneRequest();        // configurationSequence() would not send it after attach
      let st = await within(240000, stopped, 'first stop');
      assert.strictEqual(st.body.reason, 'breakpoint');
      assert.ok(changed.some(b => b.verified && b.line === ATTN_LINE));
      assert.ok(outputs.some(o => /^h absmax=\d/.test(o)));
      const threadId = st.body.threadId;
      assert.deepStrictEqual((await dc.threadsRequest()).body.threads.map(t => t.id), [threadId]);
      await inspectAndInject(dc, threadId);

      stopped = dc.waitForEvent('stopped');
      await dc.nextRequest({ threadId });
      st = await within(60000, stopped, 'stop after next');
      assert.strictEqual(st.body.reason, 'step');
      assert.strictEqual((await dc.stackTraceRequest({ threadId })).body.stackFrames[1].line, X_LINE);

      stopped = dc.waitForEvent('stopped');
      await dc.continueRequest({ threadId });
      assert.strictEqual((await within(60000, stopped, 'module:mlp')).body.reason, 'function breakpoint');

      await dc.setBreakpointsRequest({ source: { path: MODEL }, breakpoints: [] });
      await dc.setFunctionBreakpointsRequest({ breakpoints: [] });
      await dc.continueRequest({ threadId });
      await new Promise(r => setTimeout(r, 500));  // the program loops for 3 s
      stopped = dc.waitForEvent('stopped');
      await dc.pauseRequest({ threadId });
      assert.strictEqual((await within(60000, stopped, 'pause')).body.reason, 'pause');

      const exited = dc.waitForEvent('exited');
      const terminated = dc.waitForEvent('terminated');
      await dc.continueRequest({ threadId });
      assert.strictEqual((await within(60000, exited, 'exited')).body.exitCode, 3);
      await within(10000, terminated, 'terminated');
      await within(10000, dc.stop(), 'disconnect');
      assert.strictEqual(await within(60000, prog.exit, 'program exit'), 3);
    } finally {
      if (prog.proc.exitCode === null) prog.proc.kill();
    }
  });
});

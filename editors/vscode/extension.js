// The `dynstep` debug type: its debug adapter is the DAP server already listening inside the debugged
// process (`dynstep run --dap PORT script.py`), so VS Code connects to host:port instead of starting one.
'use strict';
const vscode = require('vscode');

const DEFAULT = { type: 'dynstep', request: 'attach', name: 'dynstep: attach', host: '127.0.0.1', port: 5679 };

/** @param {vscode.ExtensionContext} context */
function activate(context) {
  context.subscriptions.push(vscode.debug.registerDebugConfigurationProvider('dynstep', {
    resolveDebugConfiguration(folder, config) {
      if (!config.type && !config.request && !config.name) return { ...DEFAULT };   // F5 without a launch.json
      if (config.request !== 'attach') {
        vscode.window.showErrorMessage('dynstep runs inside your program: start it with `dynstep run --dap 5679 ' +
                                       'script.py` and use a "request": "attach" configuration.');
        return undefined;
      }
      return { ...config, host: config.host || DEFAULT.host, port: Number(config.port || DEFAULT.port) };
    },
  }));
  context.subscriptions.push(vscode.debug.registerDebugAdapterDescriptorFactory('dynstep', {
    createDebugAdapterDescriptor(session) {
      const { host, port } = session.configuration;
      return new vscode.DebugAdapterServer(Number(port), host || '127.0.0.1');
    },
  }));
}

function deactivate() {}

module.exports = { activate, deactivate };

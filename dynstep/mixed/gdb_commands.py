"""dynstep's commands inside gdb / cuda-gdb. gdb runs this file with its own embedded Python
(standard library only; dynstep never imports it):

    gdb -x .../python3.11-gdb.py -x .../dynstep/mixed/gdb_commands.py --args python -m dynstep run --native ...

    dynstep-node       the FX node, op, module and user source line of the kernel this thread is in
    dynstep-bt [N]     native backtrace (N frames), Python backtrace (py-bt) and the node
    dynstep-continue   delete dynstep's breakpoints and continue: back to the dynstep prompt at the next stop
    dynstep-clear      delete dynstep's breakpoints
    dynstep-run [N]    batch driver: run to the end, show dynstep-bt at the first N kernel stops, quit
                       with the program's exit code

The program hands breakpoints over with a SIGTRAP on its own thread after writing them to
$TMPDIR/dynstep-gdb-<pid>.json (dynstep/mixed/trap.py). gdb 13 reports a program-raised SIGTRAP
as a plain stop (it first suspects a breakpoint trap), so `$_siginfo` tells it apart.
"""

import json
import os
import sys
import tempfile

import gdb

ARMED = {}               # gdb breakpoint number -> {"kernel": {...}, "target": {...}, "node": {...}}
STATE = {"driver": False, "last": None, "shown": []}
SI_USER, SI_TKILL = 0, -6


def _helper():
    """python3.X-gdb.py's namespace (sourced with -x before this file, so into __main__)."""
    main = sys.modules.get("__main__")
    return main if getattr(main, "Frame", None) is not None else None


def _patch_line_table():
    """python3.11-gdb.py reads co_linetable through a proxy capped at 1000 bytes (safe_range), so a
    large code object (an Inductor wrapper's call(), a long script) shows `line ?`: read it whole."""
    helper = _helper()
    cls = getattr(helper, "PyCodeObjectPtr", None)
    parse = getattr(helper, "parse_location_table", None)
    if cls is None or parse is None or getattr(cls, "_dynstep_full_table", False):
        return

    def addr2line(self, addrq):
        table = self.pyop_field("co_linetable")
        size = int(table.field("ob_size"))
        raw = bytes(gdb.selected_inferior().read_memory(table.field("ob_sval").address, size))
        first = int(self.field("co_firstlineno"))
        if addrq < 0:
            return first
        for start, end, line in parse(first, raw.decode("latin-1")):   # its reader takes ord(char)
            if start <= addrq < end:
                return line
        return None

    cls.addr2line = addr2line
    cls._dynstep_full_table = True


def _python_frames(limit=24):
    """(co_filename, line) of this thread's Python frames, newest first (needs python3.X-gdb.py)."""
    frame = _helper().Frame.get_selected_python_frame()
    count = 0
    while frame is not None and count < limit:
        if frame.is_evalframe():
            py = frame.get_pyop()
            while py and not py.is_optimized_out() and count < limit:
                yield py.co_filename.proxyval(set()), py.current_line_num()
                count += 1
                if py.is_entry():
                    break
                py = py.previous()
        frame = frame.older()


class DynstepBreakpoint(gdb.Breakpoint):
    """`break *ADDR` (or a CUDA kernel name). With sites, it stops only when one of those Python
    (file, line) frames is on the stack: one aten kernel serves every call of its op, and the FX or
    wrapper line that launches it tells this node's call apart."""

    def __init__(self, spec, sites):
        super().__init__(spec, internal=False)
        self.sites = {(f, int(line)) for f, line in sites}
        self.skipped = 0

    def stop(self):
        if not self.sites or _helper() is None:
            return True     # without python3.X-gdb.py the Python stack cannot be read: always stop
        try:
            if any(site in self.sites for site in _python_frames()):
                return True
        except Exception as exc:   # never lose a stop because the helper failed
            print(f"[dynstep] could not read the Python stack ({exc!r}): stopping")
            return True
        self.skipped += 1
        return False


def _arm(data):
    made = []
    kernels = data.get("kernels", [])
    for target in data.get("targets", []):
        spec = target["cuda_kernel"] or f"*{int(target['address']):#x}"
        bp = DynstepBreakpoint(spec, target.get("sites") or [])
        owners = [kernels[i] for i in target.get("kernels", []) if i < len(kernels)] or [{"name": "?", "kind": "?"}]
        ARMED[bp.number] = {"kernel": owners[0], "target": target, "node": data.get("node", {})}
        made.append((bp.number, owners[0], target))
    return made


def _is_program_sigtrap(event):
    if isinstance(event, gdb.BreakpointEvent):
        return False
    if isinstance(event, gdb.SignalEvent):
        return event.stop_signal == "SIGTRAP"
    try:
        info = gdb.parse_and_eval("$_siginfo")
        return int(info["si_signo"]) == 5 and int(info["si_code"]) in (SI_USER, SI_TKILL)
    except gdb.error:
        return False


def _read_handoff():
    path = os.path.join(tempfile.gettempdir(), f"dynstep-gdb-{gdb.selected_inferior().pid}.json")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    try:
        os.unlink(path)    # consumed: the program sees the file gone and knows gdb armed
    except OSError:
        pass
    return data


def _on_stop(event):
    if _is_program_sigtrap(event):
        data = _read_handoff()
        if data is None:
            return            # a SIGTRAP that is not dynstep's: leave it to the user
        made = _arm(data)
        node = data.get("node", {})
        print(f"[dynstep] node {node.get('node')} ({node.get('module') or '-'}, {node.get('source') or '-'}): "
              f"{len(made)} breakpoint(s)")
        for number, kernel, target in made:
            where = target["cuda_kernel"] or f"{target['symbol']} @ {int(target['address']):#x}"
            print(f"[dynstep]   #{number} {kernel['name']}: {where}"
                  + (" (stops only for this node's launch)" if target.get("sites") else ""))
        STATE["last"] = ("trap", data)
        if not STATE["driver"]:
            print("[dynstep] `continue` runs on to the kernel: gdb stops when it runs next (it already ran for "
                  "this call); here, bt / py-bt show where dynstep handed over")
    elif isinstance(event, gdb.BreakpointEvent):
        ours = [b.number for b in event.breakpoints if b.number in ARMED]
        STATE["last"] = ("hit", ours)
        STATE["shown"] = ours
        if ours and not STATE["driver"]:
            gdb.execute("dynstep-node")
            print("[dynstep] bt, py-bt, dynstep-bt; continue (stops here again next call), "
                  "dynstep-continue (back to dynstep)")


def _exit_code(event):
    code = getattr(event, "exit_code", None)
    if code is not None:
        return int(code)
    signal_number = gdb.convenience_variable("_exitsignal")
    return 128 + int(signal_number) if signal_number is not None else None


def _on_exited(event):
    """Record the program's exit status for `dynstep gdb` (gdb itself exits 0), and quit gdb when the
    program ended by itself under `dynstep gdb` (not when gdb kills it on quit: no exit_code then)."""
    code = _exit_code(event)
    status = os.environ.get("DYNSTEP_GDB_STATUS")
    if status and code is not None:
        with open(status, "w", encoding="ascii") as f:
            f.write(str(code))
    _delete_armed()     # their addresses mean nothing in a new run of the program
    if status and getattr(event, "exit_code", None) is not None and not STATE["driver"]:
        gdb.post_event(lambda: gdb.execute(f"quit {code}"))


def _entry_for_pc(pc):
    for entry in ARMED.values():
        target = entry["target"]
        start, size = int(target.get("address") or 0), int(target.get("size") or 0)
        if start and (start == pc or start <= pc < start + size):
            return entry
    return None


def _kernel_frame():
    """(depth, frame, entry) of the newest frame of this thread inside a kernel dynstep armed."""
    frame, depth = gdb.selected_frame(), 0
    while frame is not None and depth < 64:
        try:
            fn = frame.function()
            start = int(fn.value().address) if fn is not None and fn.value().address is not None else None
        except (gdb.error, RuntimeError):
            start = None
        entry = _entry_for_pc(frame.pc()) or (_entry_for_pc(start) if start else None)
        if entry is not None:
            return depth, frame, entry
        frame, depth = frame.older(), depth + 1
    last = STATE.get("shown") or []     # a CUDA kernel: device code has no host address to match
    entry = next((ARMED[n] for n in last if n in ARMED and ARMED[n]["target"].get("cuda_kernel")), None)
    return (0, gdb.selected_frame(), entry) if entry is not None else None


class DynstepNode(gdb.Command):
    """The FX node, op, module and user source line of the kernel this thread is in."""

    def __init__(self):
        super().__init__("dynstep-node", gdb.COMMAND_STACK)

    def invoke(self, arg, from_tty):
        found = _kernel_frame()
        if found is None:
            print("[dynstep] this thread is in no kernel dynstep armed (dynstep-bt shows the stacks)")
            return
        depth, frame, entry = found
        node, kernel = entry["node"], entry["kernel"]
        print(f"[dynstep] frame #{depth}: {gdb.execute(f'info symbol {frame.pc():#x}', to_string=True).strip()}")
        sal = frame.find_sal()
        if sal.symtab is not None:
            print(f"[dynstep]   generated source  {sal.symtab.filename}:{sal.line}")
        rows = [("kernel", f"{kernel['name']} ({kernel['kind']})"), ("computes", ", ".join(kernel.get("nodes", []))),
                ("node", node.get("node")), ("op", node.get("op")), ("module", node.get("module")),
                ("source", f"{node.get('source', '')}  {node.get('source_text', '').strip()}"),
                ("graph", node.get("graph")), ("library", kernel.get("library")), ("kernel src", kernel.get("source"))]
        for key, value in rows:
            if value and str(value).strip():
                print(f"[dynstep]   {key:<11} {value}")


class DynstepBt(gdb.Command):
    """Native backtrace, Python backtrace (py-bt) and the FX node: dynstep-bt [N native frames]."""

    def __init__(self):
        super().__init__("dynstep-bt", gdb.COMMAND_STACK)

    def invoke(self, arg, from_tty):
        limit = arg.strip() or "12"
        print(f"---- native (bt {limit}) ----")
        gdb.execute(f"bt -frame-arguments presence {limit}")
        print("---- python (py-bt) ----")
        if _helper() is None:
            print("py-bt is not loaded: start with `dynstep gdb` where python3.X-gdb.py is found "
                  "(`dynstep doctor` says where it looks and how to install it)")
        else:
            gdb.execute("py-bt")
        print("---- node ----")
        gdb.execute("dynstep-node")


class DynstepClear(gdb.Command):
    """Delete the breakpoints dynstep armed."""

    def __init__(self):
        super().__init__("dynstep-clear", gdb.COMMAND_BREAKPOINTS)

    def invoke(self, arg, from_tty):
        _delete_armed()


def _delete_armed():
    for bp in gdb.breakpoints():
        if bp.number in ARMED:
            bp.delete()
    ARMED.clear()


class DynstepContinue(gdb.Command):
    """Delete dynstep's breakpoints and continue: the program runs on to its next dynstep stop."""

    def __init__(self):
        super().__init__("dynstep-continue", gdb.COMMAND_RUNNING)

    def invoke(self, arg, from_tty):
        gdb.execute("dynstep-clear")
        gdb.execute("continue")


class DynstepRun(gdb.Command):
    """Batch driver: run; at the first N (default 1) kernel stops show dynstep-bt; quit with the exit code."""

    def __init__(self):
        super().__init__("dynstep-run", gdb.COMMAND_RUNNING)

    def invoke(self, arg, from_tty):
        max_hits = int(arg.strip() or "1")
        STATE["driver"] = True
        hits = 0
        gdb.execute("run")
        while gdb.selected_inferior().pid != 0:
            last, STATE["last"] = STATE["last"], None
            if last is not None and last[0] == "hit" and last[1] and hits < max_hits:
                hits += 1
                _show_hit(hits)
                if hits >= max_hits:
                    gdb.execute("dynstep-clear")
            gdb.execute("continue")
        code = gdb.convenience_variable("_exitcode")
        signal_number = gdb.convenience_variable("_exitsignal")
        code = int(code) if code is not None else 128 + int(signal_number or 0)
        print(f"[dynstep] the program exited with code {code}")
        gdb.execute(f"quit {code}")


def _show_hit(number):
    skipped = sum(getattr(b, "skipped", 0) for b in gdb.breakpoints() if b.number in ARMED)
    print(f"==== dynstep breakpoint hit {number} (calls of the same kernel for other nodes skipped: {skipped}) ====")
    gdb.execute("dynstep-bt")
    for command in filter(None, (c.strip() for c in os.environ.get("DYNSTEP_GDB_AT_HIT", "").split(";"))):
        print(f"(gdb) {command}")
        try:
            gdb.execute(command)
        except gdb.error as exc:
            print(f"error: {exc}")


_patch_line_table()
gdb.events.stop.connect(_on_stop)
gdb.events.exited.connect(_on_exited)
DynstepNode()
DynstepBt()
DynstepClear()
DynstepContinue()
DynstepRun()

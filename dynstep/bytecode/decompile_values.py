"""The decompiler's handlers that build values, compute, store and leave (`dynstep.bytecode.decompile`).

Mixed with `MachineBase` (`dynstep.bytecode.decompile_ops`) into `Machine`. Standard library only.
"""

from __future__ import annotations

import dis

from .decompile_ops import _BINARY, Expr, MachineBase, _bound, _constant_tuple, _made


class Machine(MachineBase):
    # -- building values -----------------------------------------------------------------------
    def op_BUILD_TUPLE(self, inst: dis.Instruction) -> None:
        items = self.pops(inst.arg or 0)
        text = ", ".join(i.text for i in items)
        self.push(f"({text},)" if len(items) == 1 else f"({text})", *items)

    def op_BUILD_LIST(self, inst: dis.Instruction) -> None:
        items = self.pops(inst.arg or 0)
        self.push(f"[{', '.join(i.text for i in items)}]", *items, items=[i.text for i in items])

    def op_BUILD_SET(self, inst: dis.Instruction) -> None:
        items = self.pops(inst.arg or 0)
        self.push(f"{{{', '.join(i.text for i in items)}}}" if items else "set()", *items)

    def op_BUILD_MAP(self, inst: dis.Instruction) -> None:
        flat = self.pops(2 * (inst.arg or 0))
        pairs = [f"{k.text}: {v.text}" for k, v in zip(flat[::2], flat[1::2])]
        self.push("{" + ", ".join(pairs) + "}", *flat)

    def op_BUILD_CONST_KEY_MAP(self, inst: dis.Instruction) -> None:
        keys = self.pop()
        values = self.pops(inst.arg or 0)
        pairs = [f"{k!r}: {v.text}" for k, v in zip(_constant_tuple(keys), values)]
        self.push("{" + ", ".join(pairs) + "}", keys, *values)

    def op_BUILD_SLICE(self, inst: dis.Instruction) -> None:
        parts = self.pops(inst.arg or 2)
        self.push(f"slice({', '.join(p.text for p in parts)})", *parts).inside = ":".join(_bound(p) for p in parts)

    def op_LIST_EXTEND(self, inst: dis.Instruction) -> None:
        value = self.pop()
        self._extend(-(inst.arg or 1), value, "extend", f"*{value.wrapped(100)}")

    def op_LIST_APPEND(self, inst: dis.Instruction) -> None:
        value = self.pop()
        self._extend(-(inst.arg or 1), value, "append", value.text)

    def _extend(self, at: int, value: Expr, method: str, item: str) -> None:
        target = self.stack[at]
        shared = sum(v is target for v in self.stack) > 1
        if target.items is not None and not shared:     # still a display: show it as one
            items = [*target.items, item]
            made = Expr(f"[{', '.join(items)}]", 100, target.reads | value.reads,
                        target.indices | value.indices | {self.index}, items=items)
            self.stack[at] = made
            return
        target = self.name(target)
        self.emit(f"{target.text}.{method}({value.text})", value.indices)

    def op_LIST_TO_TUPLE(self, inst: dis.Instruction) -> None:
        value = self.pop()
        self.push(f"tuple({value.text})", value)

    def op_DICT_UPDATE(self, inst: dis.Instruction) -> None:
        value = self.pop()
        target = self.name(self.stack[-(inst.arg or 1)])
        self.emit(f"{target.text}.update({value.text})", value.indices)

    op_DICT_MERGE = op_DICT_UPDATE

    # -- operators -----------------------------------------------------------------------------
    def op_BINARY_SUBSCR(self, inst: dis.Instruction) -> None:
        key = self.pop()
        obj = self.pop()
        self.push(f"{obj.wrapped(100)}[{key.key()}]", obj, key)

    def op_BINARY_SLICE(self, inst: dis.Instruction) -> None:
        obj, start, end = self.pops(3)
        self.push(f"{obj.wrapped(100)}[{_bound(start)}:{_bound(end)}]", obj, start, end)

    def op_BINARY_OP(self, inst: dis.Instruction) -> None:
        right = self.pop()
        left = self.pop()
        if inst.argrepr == "[]":            # 3.14: subscripts are a binary op
            self.push(f"{left.wrapped(100)}[{right.key()}]", left, right)
            return
        op = inst.argrepr.rstrip("=") if inst.argrepr not in ("==", "!=") else inst.argrepr
        prec = _BINARY.get(op, 12)
        self.push(f"{left.wrapped(prec)} {op} {right.wrapped(prec + 1)}", left, right, prec=prec)

    def op_COMPARE_OP(self, inst: dis.Instruction) -> None:
        right, left = self.pop(), self.pop()
        op = inst.argrepr.replace("bool(", "").rstrip(")")
        self.push(f"{left.wrapped(7)} {op} {right.wrapped(7)}", left, right, prec=6)

    def op_IS_OP(self, inst: dis.Instruction) -> None:
        right, left = self.pop(), self.pop()
        self.push(f"{left.wrapped(7)} {'is not' if inst.arg else 'is'} {right.wrapped(7)}", left, right, prec=6)

    def op_CONTAINS_OP(self, inst: dis.Instruction) -> None:
        right, left = self.pop(), self.pop()
        self.push(f"{left.wrapped(7)} {'not in' if inst.arg else 'in'} {right.wrapped(7)}", left, right, prec=6)

    def op_UNARY_NOT(self, inst: dis.Instruction) -> None:
        value = self.pop()
        self.push(f"not {value.wrapped(5)}", value, prec=5)

    def op_UNARY_NEGATIVE(self, inst: dis.Instruction) -> None:
        value = self.pop()
        self.push(f"-{value.wrapped(14)}", value, prec=14)

    def op_UNARY_INVERT(self, inst: dis.Instruction) -> None:
        value = self.pop()
        self.push(f"~{value.wrapped(14)}", value, prec=14)

    def op_TO_BOOL(self, inst: dis.Instruction) -> None:
        pass                                # the `if` shows the value itself

    def op_UNPACK_SEQUENCE(self, inst: dis.Instruction) -> None:
        value = self.name(self.pop())
        for k in reversed(range(inst.arg or 0)):
            self.push(f"{value.text}[{k}]", value)

    # -- stores --------------------------------------------------------------------------------
    def op_STORE_FAST(self, inst: dis.Instruction) -> None:
        value = self.pop()
        name = str(inst.argval)
        if value.named and value.text == name:      # `x = x`: the COPY before already wrote it
            return
        self.before_write(name)
        self.flush()
        if any(v is value for v in self.stack):
            self.name(value, name)
            return
        self.emit(f"{name} = {value.text}", value.indices)

    op_STORE_DEREF = op_STORE_NAME = op_STORE_GLOBAL = op_STORE_FAST

    def op_STORE_FAST_STORE_FAST(self, inst: dis.Instruction) -> None:
        for name in inst.argval:
            self.op_STORE_FAST(inst._replace(argval=name))

    def op_STORE_FAST_LOAD_FAST(self, inst: dis.Instruction) -> None:
        store, load = inst.argval
        self.op_STORE_FAST(inst._replace(argval=store))
        self.op_LOAD_FAST(inst._replace(argval=load))

    def op_DELETE_FAST(self, inst: dis.Instruction) -> None:
        self.before_write(str(inst.argval))
        self.emit(f"del {inst.argval}", frozenset())

    op_DELETE_DEREF = op_DELETE_NAME = op_DELETE_GLOBAL = op_DELETE_FAST

    def _writable(self, target: Expr) -> Expr:
        """The object an item or attribute store writes into, named; values that read it named first."""
        target = self.name(target)
        for value in list(self.stack):
            if target.text in value.reads and value is not target and any(v is value for v in self.stack):
                self.name(value)
        self.flush()
        return target

    def op_STORE_SUBSCR(self, inst: dis.Instruction) -> None:
        key = self.pop()
        target = self._writable(self.pop())
        value = self.pop()
        self.emit(f"{target.text}[{key.key()}] = {value.text}", key.indices | value.indices | target.indices)

    def op_STORE_SLICE(self, inst: dis.Instruction) -> None:
        end, start = self.pop(), self.pop()
        target = self._writable(self.pop())
        value = self.pop()
        self.emit(f"{target.text}[{_bound(start)}:{_bound(end)}] = {value.text}", value.indices | target.indices)

    def op_DELETE_SUBSCR(self, inst: dis.Instruction) -> None:
        key = self.pop()
        target = self._writable(self.pop())
        self.emit(f"del {target.text}[{key.key()}]", key.indices | target.indices)

    def op_STORE_ATTR(self, inst: dis.Instruction) -> None:
        target = self._writable(self.pop())
        value = self.pop()
        self.emit(f"{target.text}.{inst.argval} = {value.text}", value.indices | target.indices)

    def op_DELETE_ATTR(self, inst: dis.Instruction) -> None:
        target = self._writable(self.pop())
        self.emit(f"del {target.text}.{inst.argval}", target.indices)

    # -- leaving -------------------------------------------------------------------------------
    def op_RETURN_VALUE(self, inst: dis.Instruction) -> bool:
        value = self.pop()
        self.flush()
        self.emit(f"return {value.text}", value.indices)
        return True

    def op_RETURN_CONST(self, inst: dis.Instruction) -> bool:
        self.flush()
        self.emit(f"return {inst.argval!r}", frozenset())
        return True

    def op_RAISE_VARARGS(self, inst: dis.Instruction) -> bool:
        values = self.pops(inst.arg or 0)
        self.flush()
        text = " from ".join(v.text for v in values)
        self.emit(f"raise {text}".rstrip(), _made(*values)[1])
        return True

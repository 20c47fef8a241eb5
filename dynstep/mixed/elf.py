"""Names for native code addresses on release builds: an ELF64 symbol-table reader, the C++
demangler and `dladdr`, all through the standard library (numpy makes the big tables fast).

`dladdr` only sees exported (.dynsym) symbols, so it cannot name the dispatcher's local
`wrapper_CPU_*` thunks; the release libtorch_cpu.so keeps its full .symtab (about 455k symbols,
no DWARF), which this reader loads once per library (about 0.1 s with numpy).

    where = symbolize(address)            # Symbol(address, library, base, name, start, size)
    table = SymbolTable.of(where.library)
    table.with_prefix(mangled_prefix("at::native::structured_addmm_out_cpu::impl"))
    demangle("_ZN2at5_ops5addmm4callE...")  -> "at::_ops::addmm::call(...)"
"""

from __future__ import annotations

import bisect
import ctypes
import dataclasses
import functools
import mmap
import os
import struct
import threading

STT_FUNC = 2
SHT_SYMTAB, SHT_DYNSYM = 2, 11


@dataclasses.dataclass(frozen=True)
class Symbol:
    """A code address in a loaded library and the function symbol around it."""

    address: int           # run-time address
    library: str           # the loaded file (dladdr's dli_fname, real path)
    base: int              # where the library is loaded
    mangled: str = ""      # "" when no symbol covers the address (stripped library)
    name: str = ""         # demangled
    start: int = 0         # run-time address of the symbol's first byte
    size: int = 0

    @property
    def offset(self) -> int:
        """The address relative to the library's load base (what `nm` and `objdump` show)."""
        return self.address - self.base


class SymbolTable:
    """The FUNC symbols of one ELF64 file, sorted by address (.symtab when present, else .dynsym)."""

    _cache: dict[str, "SymbolTable"] = {}
    _lock = threading.Lock()

    @classmethod
    def of(cls, path: str) -> "SymbolTable":
        path = os.path.realpath(path)
        with cls._lock:
            table = cls._cache.get(path)
            if table is None:
                table = cls._cache[path] = cls(path)
        return table

    def __init__(self, path: str) -> None:
        self.path = path
        with open(path, "rb") as f:
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if self._mm[:4] != b"\x7fELF" or self._mm[4] != 2:
            raise ValueError(f"{path}: not an ELF64 file")
        section, strings = self._sections()
        self.kind = "symtab" if section[1] == SHT_SYMTAB else "dynsym"
        self._str_off, self._str_size = strings[4], strings[5]
        self._values, self._sizes, self._names = _function_rows(self._mm, section[4], section[5] // section[9])
        self._by_name: dict[int, int] | None = None

    def _sections(self) -> tuple[tuple, tuple]:
        mm = self._mm
        (shoff,) = struct.unpack_from("<Q", mm, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", mm, 0x3A)
        headers = [struct.unpack_from("<IIQQQQIIQQ", mm, shoff + i * shentsize) for i in range(shnum)]
        for wanted in (SHT_SYMTAB, SHT_DYNSYM):
            for header in headers:
                if header[1] == wanted:
                    return header, headers[header[6]]
        raise ValueError(f"{self.path}: no symbol table (fully stripped)")

    def name_at(self, offset: int) -> str:
        start = self._str_off + offset
        return self._mm[start:self._mm.find(b"\0", start)].decode("utf-8", "replace")

    def lookup(self, offset: int) -> tuple[str, int, int] | None:
        """(mangled name, start offset, size) of the function containing a library-relative offset."""
        i = bisect.bisect_right(self._values, offset) - 1
        while i >= 0 and self._values[i] > offset - (1 << 20):
            start, size = self._values[i], self._sizes[i]
            if start <= offset < start + max(size, 1):
                return self.name_at(self._names[i]), start, size
            i -= 1
        return None

    def with_prefix(self, prefix: str, limit: int = 20) -> list[tuple[str, int, int]]:
        """Every function whose mangled name starts with `prefix`: [(mangled, start offset, size)]."""
        if self._by_name is None:
            self._by_name = {n: i for i, n in enumerate(self._names)}
        needle, out = b"\0" + prefix.encode(), []
        pos, end = self._str_off, self._str_off + self._str_size
        while len(out) < limit:
            pos = self._mm.find(needle, pos, end)
            if pos < 0:
                break
            i = self._by_name.get(pos + 1 - self._str_off)
            if i is not None:
                out.append((self.name_at(self._names[i]), self._values[i], self._sizes[i]))
            pos += 1
        return out


def _function_rows(mm: mmap.mmap, offset: int, count: int) -> tuple[list[int], list[int], list[int]]:
    """(start, size, name offset) of every defined FUNC symbol, sorted by start."""
    try:
        import numpy as np
    except ImportError:
        rows = sorted((value, size, name) for name, info, _, _, value, size
                      in struct.iter_unpack("<IBBHQQ", mm[offset:offset + 24 * count])
                      if info & 0xF == STT_FUNC and value)
        return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
    layout = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"),
                       ("value", "<u8"), ("size", "<u8")])
    rows = np.frombuffer(mm, dtype=layout, count=count, offset=offset)
    rows = rows[((rows["info"] & 0xF) == STT_FUNC) & (rows["value"] != 0)]
    rows = rows[np.argsort(rows["value"], kind="stable")]
    return rows["value"].tolist(), rows["size"].tolist(), rows["name"].tolist()


def mangled_prefix(qualified: str) -> str:
    """'at::native::structured_addmm_out_cpu::impl' -> '_ZN2at6native24structured_addmm_out_cpu4implE'."""
    return "_ZN" + "".join(f"{len(part)}{part}" for part in qualified.split("::")) + "E"


@functools.lru_cache(maxsize=1)
def _demangler():
    try:
        lib = ctypes.CDLL("libstdc++.so.6")
        fn = lib.__cxa_demangle
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_int)]
    free = ctypes.CDLL(None).free
    free.argtypes = [ctypes.c_void_p]
    return fn, free


@functools.lru_cache(maxsize=4096)
def demangle(name: str) -> str:
    """The C++ name behind a mangled one (the name itself when it is not mangled or libstdc++ is absent)."""
    tools = _demangler()
    if tools is None or not name.startswith("_Z"):
        return name
    fn, free = tools
    status = ctypes.c_int()
    out = fn(name.encode(), None, None, ctypes.byref(status))
    if not out or status.value != 0:
        return name
    try:
        return ctypes.string_at(out).decode("utf-8", "replace")
    finally:
        free(out)


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


@functools.lru_cache(maxsize=1)
def _dladdr():
    fn = ctypes.CDLL(None).dladdr
    fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    fn.restype = ctypes.c_int
    return fn


def loaded_library(address: int) -> tuple[str, int] | None:
    """(real path, load base) of the loaded library holding `address`, or None (not code of this process)."""
    info = _DlInfo()
    if not address or not _dladdr()(ctypes.c_void_p(address), ctypes.byref(info)) or not info.dli_fname:
        return None
    return os.path.realpath(info.dli_fname.decode()), info.dli_fbase or 0


def symbolize(address: int) -> Symbol | None:
    """The library and function symbol of a run-time code address (None: not in a loaded library)."""
    where = loaded_library(address)
    if where is None:
        return None
    library, base = where
    try:
        hit = SymbolTable.of(library).lookup(address - base)
    except (OSError, ValueError):
        hit = None
    if hit is None:
        return Symbol(address=address, library=library, base=base)
    mangled, start, size = hit
    return Symbol(address=address, library=library, base=base, mangled=mangled, name=demangle(mangled),
                  start=base + start, size=size)


def symbol_in(library: str, name: str) -> int | None:
    """The run-time address of exported `name` in exactly that loaded library (never loads it, never
    falls through to a same-named symbol of another library: every Inductor .so exports `kernel`)."""
    try:
        lib = ctypes.CDLL(library, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        address = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    except (OSError, AttributeError):
        return None
    where = loaded_library(address or 0)
    if where is None or where[0] != os.path.realpath(library):
        return None
    return address

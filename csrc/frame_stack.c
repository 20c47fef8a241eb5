/* dynstep_frame_stack: read a running Python frame's value stack (CPython 3.11, 3.12, 3.13).
 *
 * The bytecode stepper shows the real value stack at each instruction (`stack`). torch >= 2.12 has
 * a helper for it (torch._C._dynamo.eval_frame._get_frame_value_stack_with_depth); torch 2.11 has
 * none, so dynstep builds this file on first use with the running interpreter's
 * own headers (dynstep/bytecode/framestack.py) and calls value_stack(frame, depth).
 *
 * Why the depth comes from the caller: the interpreter keeps its stack pointer in a C local and
 * stores it in the frame (stacktop) only around some calls. During a sys.monitoring INSTRUCTION
 * callback (3.12+) stacktop is -1, so the caller passes the static depth before the instruction
 * (dynstep/bytecode/code.py: Row.depth). Where stacktop *is* stored (a 3.11 settrace callback, a
 * frame suspended in a Python call) it is the authority and the smaller of the two is read.
 *
 * The interpreter frame is an internal structure whose layout differs per minor version
 * (Include/internal/pycore_frame.h): 3.11 has f_code in the middle of the specials, 3.12 moved it
 * first, 3.13 replaced it with f_executable. The struct comes from the headers of the interpreter
 * this is compiled for, and only the versions listed below, whose layouts were read and tested,
 * compile at all: a new minor version must be checked by hand before it is added here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000
#error "dynstep frame_stack.c: the interpreter frame layout of this CPython version is not verified (3.11-3.13 are)"
#endif

#ifndef Py_BUILD_CORE
#define Py_BUILD_CORE 1
#endif
#include "internal/pycore_frame.h"
#undef Py_BUILD_CORE

#if PY_VERSION_HEX >= 0x030D0000
#define DYNSTEP_FRAME_CODE(iframe) ((iframe)->f_executable)
#define DYNSTEP_LAYOUT "CPython 3.13 _PyInterpreterFrame (f_executable, localsplus, stacktop)"
#elif PY_VERSION_HEX >= 0x030C0000
#define DYNSTEP_FRAME_CODE(iframe) ((PyObject *)(iframe)->f_code)
#define DYNSTEP_LAYOUT "CPython 3.12 _PyInterpreterFrame (f_code first, localsplus, stacktop)"
#else
#define DYNSTEP_FRAME_CODE(iframe) ((PyObject *)(iframe)->f_code)
#define DYNSTEP_LAYOUT "CPython 3.11 _PyInterpreterFrame (f_code, localsplus, stacktop)"
#endif

/* Stands for a NULL slot (CPython pushes NULL before a callable, e.g. LOAD_GLOBAL "NULL + f"). */
static PyObject *null_slot = NULL;

/* The interpreter frame behind a frame object that is still running (or suspended), or NULL with
 * an exception set saying why its stack cannot be read. */
static _PyInterpreterFrame *running_frame(PyObject *obj, PyCodeObject **code) {
    if (!PyFrame_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "value_stack() needs a frame object, got %.100s", Py_TYPE(obj)->tp_name);
        return NULL;
    }
    _PyInterpreterFrame *iframe = ((PyFrameObject *)obj)->f_frame;
    if (iframe == NULL || iframe->owner == FRAME_OWNED_BY_FRAME_OBJECT) {
        /* the frame returned: its data was copied into the frame object and the stack emptied */
        PyErr_SetString(PyExc_ValueError, "the frame has finished running: it has no value stack any more");
        return NULL;
    }
    PyObject *executable = DYNSTEP_FRAME_CODE(iframe);
    if (executable == NULL || !PyCode_Check(executable)) {
        PyErr_SetString(PyExc_ValueError, "the frame runs no Python code object (a C entry frame)");
        return NULL;
    }
    *code = (PyCodeObject *)executable;
    return iframe;
}

static PyObject *value_stack(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "value_stack(frame, depth) takes 2 arguments");
        return NULL;
    }
    long depth = PyLong_AsLong(args[1]);
    if (depth == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (depth < 0) {
        PyErr_Format(PyExc_ValueError, "value_stack(): depth must be >= 0, got %ld", depth);
        return NULL;
    }
    PyCodeObject *code = NULL;
    _PyInterpreterFrame *iframe = running_frame(args[0], &code);
    if (iframe == NULL) {
        return NULL;
    }
    int nlocalsplus = code->co_nlocalsplus;
    if (depth > code->co_stacksize) {
        depth = code->co_stacksize;   /* never past the slots the frame has */
    }
    int trusted = iframe->stacktop >= nlocalsplus;
    if (trusted && iframe->stacktop - nlocalsplus < depth) {
        depth = iframe->stacktop - nlocalsplus;
    }
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        return NULL;
    }
    for (long i = 0; i < depth; i++) {
        PyObject *value = iframe->localsplus[nlocalsplus + i];
        if (value == NULL) {
            value = null_slot;
        } else if (!trusted && Py_REFCNT(value) <= 0) {
            break;   /* the static depth ran past what is live: stop before a freed object */
        }
        if (PyList_Append(out, value) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

static PyObject *stack_pointer(PyObject *self, PyObject *frame) {
    PyCodeObject *code = NULL;
    _PyInterpreterFrame *iframe = running_frame(frame, &code);
    if (iframe == NULL) {
        return NULL;
    }
    if (iframe->stacktop < code->co_nlocalsplus) {
        Py_RETURN_NONE;
    }
    return PyLong_FromLong(iframe->stacktop - code->co_nlocalsplus);
}

static PyMethodDef methods[] = {
    {"value_stack", (PyCFunction)(void (*)(void))value_stack, METH_FASTCALL,
     "value_stack(frame, depth) -> list: the frame's value stack, bottom first, at most depth slots; "
     "NULL slots are the module's NULL object."},
    {"stack_pointer", stack_pointer, METH_O,
     "stack_pointer(frame) -> int | None: the depth the interpreter stored in the frame, None when it "
     "holds the pointer in a C local (3.12+ during an INSTRUCTION event)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "dynstep_frame_stack",
    "Read a running frame's value stack (dynstep's bytecode stepper; csrc/frame_stack.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit_dynstep_frame_stack(void) {
    /* the headers it was compiled with must be those of the interpreter loading it */
    if ((Py_Version >> 16) != (PY_VERSION_HEX >> 16)) {
        PyErr_Format(PyExc_ImportError, "dynstep_frame_stack was compiled for CPython %d.%d, not %d.%d",
                     PY_MAJOR_VERSION, PY_MINOR_VERSION, (int)(Py_Version >> 24), (int)((Py_Version >> 16) & 0xff));
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (null_slot == NULL) {
        null_slot = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
    }
    if (null_slot == NULL || PyModule_AddObjectRef(m, "NULL", null_slot) < 0 ||
        PyModule_AddStringConstant(m, "LAYOUT", DYNSTEP_LAYOUT) < 0 ||
        PyModule_AddIntConstant(m, "PY_VERSION_HEX", PY_VERSION_HEX) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

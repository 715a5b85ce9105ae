/* The spawner's C loop as a Python module, where its executable (_spawnc_main.c) was not built:
 * the spawner's process (confined.py's _START) imports it and calls serve(FD). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_spawnc.h"

static PyObject *serve(PyObject *self, PyObject *args) {
    (void)self;
    int control;
    if (!PyArg_ParseTuple(args, "i", &control)) return NULL;
    spawnc_serve(control); /* returns only when it could not start */
    return PyErr_SetFromErrno(PyExc_OSError);
}

static PyMethodDef methods[] = {
    {"serve", serve, METH_VARARGS, "serve(fd): answer runner's requests; never returns"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_spawnc", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__spawnc(void) { return PyModule_Create(&module); }

/* The plain CPython-API prototype: what dlfuse._ext does for one op with the schema-driven
 * parsing left out, so that it does the same work as the nanobind and tvm-ffi prototypes:
 * METH_FASTCALL, four positional tensors, DLPack import through the type's exchange API where
 * it has one (torch), else __dlpack__(max_version=(1, 0)) and the capsule. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlpack/dlpack.h>

#include "common.h"

typedef struct {
  DLTensor local;
  DLTensor* t;
  DLManagedTensorVersioned* mv;
} View;

static PyObject *s_api, *s_dlpack, *kw_max, *v10;

static const DLPackExchangeAPI* api_of(PyTypeObject* tp) {
  static PyTypeObject* cached_tp;
  static const DLPackExchangeAPI* cached;
  if (tp == cached_tp) return cached;
  const DLPackExchangeAPI* api = NULL;
  PyObject* cap = PyObject_GetAttr((PyObject*)tp, s_api);
  if (!cap) {
    PyErr_Clear();
  } else {
    if (PyCapsule_IsValid(cap, "dlpack_exchange_api")) {
      const DLPackExchangeAPIHeader* h = PyCapsule_GetPointer(cap, "dlpack_exchange_api");
      while (h && !(h->version.major == 1 && h->version.minor >= 3)) h = h->prev_api;
      api = (const DLPackExchangeAPI*)h;
    }
    Py_DECREF(cap);
  }
  cached_tp = tp;
  cached = api;
  return api;
}

static int import(PyObject* o, View* v) {
  memset(v, 0, sizeof *v);
  const DLPackExchangeAPI* api = api_of(Py_TYPE(o));
  if (api && api->dltensor_from_py_object_no_sync) {
    if (api->dltensor_from_py_object_no_sync(o, &v->local) != 0) return -1;
    v->t = &v->local;
    return 0;
  }
  PyObject* a[2] = {o, v10};
  PyObject* cap = PyObject_VectorcallMethod(s_dlpack, a, 1, kw_max);
  if (!cap) return -1;
  if (!PyCapsule_IsValid(cap, "dltensor_versioned")) {
    Py_DECREF(cap);
    PyErr_SetString(PyExc_TypeError, "expected a dltensor_versioned capsule");
    return -1;
  }
  v->mv = PyCapsule_GetPointer(cap, "dltensor_versioned");
  PyCapsule_SetName(cap, "used_dltensor_versioned");
  Py_DECREF(cap);
  v->t = &v->mv->dl_tensor;
  return 0;
}

static void release(View* v) {
  if (v->mv && v->mv->deleter) v->mv->deleter(v->mv);
  v->mv = NULL;
}

static PyObject* py_call(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 4) {
    PyErr_SetString(PyExc_TypeError, "call(x, y, bias, out)");
    return NULL;
  }
  View v[4];
  int n = 0;
  for (; n < 4; ++n)
    if (import(args[n], &v[n]) < 0) break;
  int st = -1;
  if (n == 4) {
    Py_BEGIN_ALLOW_THREADS st = proto_run(v[0].t, v[1].t, v[2].t, v[3].t);
    Py_END_ALLOW_THREADS
  }
  for (int i = 0; i < n; ++i) release(&v[i]);
  if (n < 4) return NULL;
  if (st) {
    PyErr_Format(PyExc_RuntimeError, "dlfuse: %s", proto_last_error_fn());
    return NULL;
  }
  Py_RETURN_NONE;
}

static PyObject* py_init(PyObject* self, PyObject* args) {
  (void)self;
  unsigned long long reg, get, call, le;
  const char* op;
  if (!PyArg_ParseTuple(args, "KsKKK", &reg, &op, &get, &call, &le)) return NULL;
  return PyLong_FromLong(proto_init((uintptr_t)reg, op, (uintptr_t)get, (uintptr_t)call, (uintptr_t)le));
}

static PyMethodDef methods[] = {{"call", (PyCFunction)(void (*)(void))py_call, METH_FASTCALL, "call(x, y, bias, out)"},
                                {"init", py_init, METH_VARARGS, "init(registry, op, op_get, op_call, last_error)"},
                                {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "proto_capi", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_proto_capi(void) {
  s_api = PyUnicode_InternFromString("__dlpack_c_exchange_api__");
  s_dlpack = PyUnicode_InternFromString("__dlpack__");
  kw_max = Py_BuildValue("(s)", "max_version");
  v10 = Py_BuildValue("(ii)", 1, 0);
  if (!s_api || !s_dlpack || !kw_max || !v10) return NULL;
  return PyModule_Create(&mod);
}

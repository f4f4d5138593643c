/* DLPack import: a Python tensor's DLTensor, borrowed for one call, through its type's DLPack
 * exchange API where it has one (looked up once per type), else __dlpack__ and its capsule;
 * dlfuse.Tensor by its own address. */
#include "ext.h"

/* ---- per-type facts: the exchange API (cached per type, as DLPack asks) ----------------- */

enum { TF_NUMPY = 1, TF_TORCH = 2 };
typedef struct {
  PyTypeObject* tp;
  const DLPackExchangeAPI* api;
  int flags;
} TypeInfo;
#define TYPE_CACHE 32
static TypeInfo g_types[TYPE_CACHE];
static int g_ntypes;

static const DLPackExchangeAPI* exchange_api_of(PyTypeObject* tp) {
#if DLFUSE_HAVE_EXCHANGE_API
  PyObject* cap = PyObject_GetAttr((PyObject*)tp, S.s_dlpack_c_api);
  if (!cap) {
    PyErr_Clear();
    return NULL;
  }
  const DLPackExchangeAPI* api = NULL;
  if (PyCapsule_IsValid(cap, "dlpack_exchange_api")) {
    const DLPackExchangeAPIHeader* h = (const DLPackExchangeAPIHeader*)PyCapsule_GetPointer(cap, "dlpack_exchange_api");
    /* Walk to a table of major 1 at least as new as the struct we read (1.3); older or
     * newer-major tables are not used. */
    while (h && !(h->version.major == 1 && h->version.minor >= 3)) h = h->prev_api;
    if (h) {
      api = (const DLPackExchangeAPI*)h;
      if (!api->managed_tensor_allocator || !api->managed_tensor_from_py_object_no_sync ||
          !api->managed_tensor_to_py_object_no_sync || !api->current_work_stream)
        api = NULL;
    }
  }
  Py_DECREF(cap);
  return api;
#else
  (void)tp;
  return NULL;
#endif
}

static TypeInfo* type_info(PyTypeObject* tp) {
  for (int i = 0; i < g_ntypes; ++i)
    if (g_types[i].tp == tp) return &g_types[i];
  TypeInfo ti = {tp, exchange_api_of(tp), 0};
  if (S.ndarray && tp == S.ndarray) ti.flags |= TF_NUMPY;
  PyObject* mod = PyObject_GetAttr((PyObject*)tp, S.s_module);
  const char* ms = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : NULL;
  if (ms && strncmp(ms, "torch", 5) == 0 && (ms[5] == 0 || ms[5] == '.')) ti.flags |= TF_TORCH;
  Py_XDECREF(mod);
  PyErr_Clear();
  static TypeInfo spare;
  if (g_ntypes == TYPE_CACHE) { /* many types: keep answering, uncached */
    spare = ti;
    return &spare;
  }
  Py_INCREF(tp); /* a cached type must outlive its entry */
  g_types[g_ntypes] = ti;
  return &g_types[g_ntypes++];
}

/* ---- borrowed tensors ------------------------------------------------------------------- */

void view_release(View* v) {
  if (v->mv && v->mv->deleter) v->mv->deleter(v->mv);
  if (v->ml && v->ml->deleter) v->ml->deleter(v->ml);
  v->mv = NULL;
  v->ml = NULL;
  Py_CLEAR(v->keep);
  v->t = NULL;
}

static int take_capsule(PyObject* cap, const char* name, View* v) {
  if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
    DLManagedTensorVersioned* m = (DLManagedTensorVersioned*)PyCapsule_GetPointer(cap, "dltensor_versioned");
    if (m->version.major != 1) {
      PyErr_Format(PyExc_BufferError, "dlfuse: argument '%s': DLPack major version %u is not supported (expected 1)",
                   name, (unsigned)m->version.major);
      return -1; /* not consumed: the capsule's destructor frees it */
    }
    /* Consumed: the producer's destructor leaves a renamed capsule alone, we delete. */
    if (PyCapsule_SetName(cap, "used_dltensor_versioned") < 0) return -1;
    v->mv = m;
    v->t = &m->dl_tensor;
    v->read_only = (m->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
    return 0;
  }
  if (PyCapsule_IsValid(cap, "dltensor")) {
    DLManagedTensor* m = (DLManagedTensor*)PyCapsule_GetPointer(cap, "dltensor");
    if (PyCapsule_SetName(cap, "used_dltensor") < 0) return -1;
    v->ml = m;
    v->t = &m->dl_tensor;
    return 0;
  }
  PyErr_Format(PyExc_TypeError,
               "dlfuse: argument '%s': __dlpack__ returned %s, not an unconsumed 'dltensor' or "
               "'dltensor_versioned' capsule",
               name, Py_TYPE(cap)->tp_name);
  return -1;
}

/* stream: what a __dlpack__ producer on a stream device is asked to sync to (DLPack's
 * spelling: the legacy default stream is 1). */
int view_import(PyObject* obj, const char* name, void* stream, View* v) {
  memset(v, 0, sizeof *v);
  PyTypeObject* tp = Py_TYPE(obj);
  if (S.tensor_type && PyObject_TypeCheck(obj, (PyTypeObject*)S.tensor_type)) {
    PyObject* a = PyObject_GetAttr(obj, S.s_tensor_addr);
    if (!a) return -1;
    v->t = (DLTensor*)PyLong_AsVoidPtr(a);
    Py_DECREF(a);
    if (!v->t) {
      if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "dlfuse: argument '%s': the dlfuse.Tensor is freed", name);
      return -1;
    }
    return 0;
  }
  TypeInfo* ti = type_info(tp);
#if DLFUSE_HAVE_EXCHANGE_API
  if (ti->api) {
    v->api = ti->api;
    if (ti->api->dltensor_from_py_object_no_sync) {
      if (ti->api->dltensor_from_py_object_no_sync(obj, &v->local) != 0) return -1;
      v->t = &v->local;
      return 0;
    }
    if (ti->api->managed_tensor_from_py_object_no_sync(obj, &v->mv) != 0) return -1;
    v->t = &v->mv->dl_tensor;
    v->read_only = (v->mv->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
    return 0;
  }
#endif
  int32_t dev_type = kDLCPU;
  if (!(ti->flags & TF_NUMPY)) {
    PyObject* d = PyObject_CallMethodNoArgs(obj, S.s_dlpack_device);
    if (!d) {
      if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
      PyErr_Clear();
      if (!PyObject_HasAttr(obj, S.s_dlpack)) {
        PyErr_Format(PyExc_TypeError, "dlfuse: argument '%s' must support the DLPack protocol (__dlpack__), got %s",
                     name, tp->tp_name);
        return -1;
      }
    } else {
      PyObject* t0 = PyTuple_Check(d) && PyTuple_GET_SIZE(d) >= 1 ? PyTuple_GET_ITEM(d, 0) : NULL;
      long dt = t0 ? PyLong_AsLong(t0) : -1;
      Py_DECREF(d);
      if (!t0 || (dt == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "dlfuse: argument '%s': __dlpack_device__() must return (device_type, device_id)",
                     name);
        return -1;
      }
      dev_type = (int32_t)dt;
    }
  }
  PyObject* src = obj;
  Py_INCREF(src);
  if (ti->flags & TF_TORCH) { /* torch's __dlpack__ refuses tensors that require grad */
    PyObject* rg = PyObject_GetAttr(src, S.s_requires_grad);
    int need = rg ? PyObject_IsTrue(rg) : (PyErr_Clear(), 0);
    Py_XDECREF(rg);
    if (need > 0) {
      PyObject* det = PyObject_CallMethodNoArgs(src, S.s_detach);
      Py_DECREF(src);
      if (!det) return -1;
      src = det;
    }
  }
  /* Method calls without a bound-method object (PyObject_VectorcallMethod): the first slot
   * is the receiver. A producer from before DLPack 1.0 refuses max_version (TypeError). */
  PyObject* cap;
  if (is_stream_device(dev_type)) {
    PyObject* s = PyLong_FromVoidPtr(stream ? stream : (void*)1);
    if (!s) {
      Py_DECREF(src);
      return -1;
    }
    PyObject* a[3] = {src, s, S.version_1_0};
    cap = PyObject_VectorcallMethod(S.s_dlpack, a, 1, S.kw_stream_max);
    if (!cap && PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      cap = PyObject_VectorcallMethod(S.s_dlpack, a, 1, S.kw_stream);
    }
    Py_DECREF(s);
  } else {
    PyObject* a[2] = {src, S.version_1_0};
    cap = PyObject_VectorcallMethod(S.s_dlpack, a, 1, S.kw_max_version);
    if (!cap && PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      cap = PyObject_VectorcallMethod(S.s_dlpack, a, 1, NULL);
    }
  }
  if (!cap) {
    Py_DECREF(src);
    if (PyErr_ExceptionMatches(PyExc_AttributeError) && !PyObject_HasAttr(obj, S.s_dlpack)) {
      PyErr_Clear();
      PyErr_Format(PyExc_TypeError, "dlfuse: argument '%s' must support the DLPack protocol (__dlpack__), got %s", name,
                   tp->tp_name);
    }
    return -1;
  }
  int rc = take_capsule(cap, name, v);
  Py_DECREF(cap);
  if (rc == 0 && src != obj)
    v->keep = src; /* the detached tensor owns nothing extra, but keep it while in use */
  else
    Py_DECREF(src);
  return rc;
}

int raise_read_only(const char* name) {
  char msg[256];
  snprintf(msg, sizeof msg, "%s: expected a writable tensor, got one the producer exported as read-only", name);
  return raise_status(DLFUSE_STATUS_INVALID_ARGUMENT, msg);
}

/* The (major, minor) of the DLPack exchange API a type offers, for tests and tools. */
static PyObject* py_exchange_api(PyObject* self, PyObject* obj) {
  (void)self;
  TypeInfo* ti = type_info(PyType_Check(obj) ? (PyTypeObject*)obj : Py_TYPE(obj));
  if (!ti->api) Py_RETURN_NONE;
#if DLFUSE_HAVE_EXCHANGE_API
  const DLPackExchangeAPIHeader* h = &ti->api->header;
  return Py_BuildValue("(II)", (unsigned)h->version.major, (unsigned)h->version.minor);
#else
  Py_RETURN_NONE;
#endif
}

PyMethodDef ext_import_methods[] = {
    {"exchange_api", py_exchange_api, METH_O,
     "The (major, minor) DLPack exchange API a type (or an object's type) offers, or None."},
    {NULL, NULL, 0, NULL}};

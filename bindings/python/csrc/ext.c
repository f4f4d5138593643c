/* dlfuse._ext: the hot path of the Python package on the CPython API.
 *
 * Per call: parse the arguments (vectorcall, no tuple/dict), take each tensor's DLTensor
 * (the type's DLPack exchange API where it has one, else __dlpack__), allocate missing
 * outputs (the exchange API's allocator, numpy.empty, or a Python fallback), call
 * libdlfuse, raise the package's exception with the C message on failure.
 *
 * libdlfuse is dlopen'ed at load() from the path the Python side resolved
 * ($DLFUSE_LIBRARY, the wheel's own copy, the prefix): the same handle ctypes uses for the
 * registry's admin calls, so both sides share one library and its per-thread last error.
 * A call through a dlsym'ed pointer costs what a PLT call does.
 *
 * Everything here runs with the GIL held; the module state is process-wide. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include <dlpack/dlpack.h>
#include <dlfuse/dlfuse.h>

#if DLPACK_MAJOR_VERSION > 1 || (DLPACK_MAJOR_VERSION == 1 && DLPACK_MINOR_VERSION >= 3)
#define DLFUSE_HAVE_EXCHANGE_API 1
#else
#define DLFUSE_HAVE_EXCHANGE_API 0
typedef struct DLPackExchangeAPI DLPackExchangeAPI;
#endif

#define MAX_NDIM 64 /* output shapes are built on the stack; deeper ones are left to C's checks */

/* ---- module state -------------------------------------------------------------------- */

static struct {
  void* lib;
  __typeof__(&dlfuse_matmul_add_relu) mar;
  __typeof__(&dlfuse_matmul_add_relu_backward) mar_bwd;
  __typeof__(&dlfuse_add_mul_activation) amc;
  __typeof__(&dlfuse_add_mul_activation_backward) amc_bwd;
  /* ABI 1.1; NULL with a libdlfuse of ABI 1.0 (the ops then say so) */
  __typeof__(&dlfuse_matmul_add_activation) maa;
  __typeof__(&dlfuse_matmul_add_activation_backward) maa_bwd;
  __typeof__(&dlfuse_matmul_add_residual) mres;
  __typeof__(&dlfuse_matmul_add_residual_backward) mres_bwd;
  __typeof__(&dlfuse_add_mul_activation_backward_from_out) amc_bwd_out;
  __typeof__(&dlfuse_last_error) last_error;
  /* ABI 1.2: any op by name, by its schema; NULL with an older libdlfuse */
  __typeof__(&dlfuse_op_get) op_get;
  __typeof__(&dlfuse_op_schema) op_schema;
  __typeof__(&dlfuse_op_infer_outputs) op_infer;
  __typeof__(&dlfuse_op_call) op_call;
  PyObject* errors[16];     /* status -> exception class; [0] is dlfuse.Error */
  PyObject* tensor_type;    /* dlfuse.Tensor */
  PyObject* alloc_fallback; /* _core._alloc_fallback(like, shape, code, bits, dev_type, dev_id, registry) */
  PyObject* default_registry; /* _core.registry */
  PyObject* loader;         /* _core._load_ext */
  PyObject* activations;    /* name -> int */
  PyObject* activation_names; /* sorted list, for the message */
  PyObject* numpy_empty;
  PyTypeObject* ndarray;
  void* default_handle;
  PyObject* default_registry_obj;
  PyObject* s_dlpack, *s_dlpack_device, *s_dlpack_c_api, *s_tensor_addr, *s_h, *s_dtype,
      *s_stream, *s_written, *s_max_version, *s_requires_grad, *s_detach, *s_cuda_stream,
      *s_ptr, *s_handle, *s_module;
  PyObject* kw_max_version;   /* ("max_version",) */
  PyObject* kw_stream_max;    /* ("stream", "max_version") */
  PyObject* kw_stream;        /* ("stream",) */
  PyObject* kw_dtype;         /* ("dtype",) */
  PyObject* version_1_0;      /* (1, 0) */
} S;

static int is_stream_device(int32_t t) { return t == kDLCUDA || t == kDLCUDAManaged || t == kDLROCM; }

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

typedef struct {
  DLTensor local;               /* filled by dltensor_from_py_object_no_sync */
  DLTensor* t;
  DLManagedTensorVersioned* mv; /* owned: its deleter runs at release */
  DLManagedTensor* ml;
  PyObject* keep;               /* a detached torch tensor, kept while t is used */
  const DLPackExchangeAPI* api; /* the type's, when it has one */
  int read_only;
} View;

static void view_release(View* v) {
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
      PyErr_Format(PyExc_BufferError,
                   "dlfuse: argument '%s': DLPack major version %u is not supported (expected 1)",
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
static int view_import(PyObject* obj, const char* name, void* stream, View* v) {
  memset(v, 0, sizeof *v);
  PyTypeObject* tp = Py_TYPE(obj);
  if (S.tensor_type && PyObject_TypeCheck(obj, (PyTypeObject*)S.tensor_type)) {
    PyObject* a = PyObject_GetAttr(obj, S.s_tensor_addr);
    if (!a) return -1;
    v->t = (DLTensor*)PyLong_AsVoidPtr(a);
    Py_DECREF(a);
    if (!v->t) {
      if (!PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "dlfuse: argument '%s': the dlfuse.Tensor is freed", name);
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
        PyErr_Format(PyExc_TypeError,
                     "dlfuse: argument '%s' must support the DLPack protocol (__dlpack__), got %s",
                     name, tp->tp_name);
        return -1;
      }
    } else {
      PyObject* t0 = PyTuple_Check(d) && PyTuple_GET_SIZE(d) >= 1 ? PyTuple_GET_ITEM(d, 0) : NULL;
      long dt = t0 ? PyLong_AsLong(t0) : -1;
      Py_DECREF(d);
      if (!t0 || (dt == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "dlfuse: argument '%s': __dlpack_device__() must return (device_type, device_id)",
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
      PyErr_Format(PyExc_TypeError,
                   "dlfuse: argument '%s' must support the DLPack protocol (__dlpack__), got %s",
                   name, tp->tp_name);
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

static int raise_status(int status, const char* message);

static int view_import_out(PyObject* obj, const char* name, void* stream, View* v) {
  if (view_import(obj, name, stream, v) < 0) return -1;
  if (v->read_only) {
    view_release(v);
    char msg[256];
    snprintf(msg, sizeof msg, "%s: expected a writable tensor, got one the producer exported as read-only", name);
    return raise_status(1, msg);
  }
  return 0;
}

/* ---- errors ------------------------------------------------------------------------------ */

static int raise_status(int status, const char* message) {
  PyObject* cls = (status > 0 && status < 16 && S.errors[status]) ? S.errors[status] : S.errors[0];
  if (!message) message = S.last_error ? S.last_error() : "";
  if (!message) message = "";
  PyObject* msg = PyUnicode_DecodeUTF8(message, (Py_ssize_t)strlen(message), "replace");
  if (!msg) return -1;
  if (!cls) {
    PyErr_SetObject(PyExc_RuntimeError, msg);
    Py_DECREF(msg);
    return -1;
  }
  PyObject* st = PyLong_FromLong(status);
  PyObject* exc = st ? PyObject_CallFunctionObjArgs(cls, st, msg, NULL) : NULL;
  Py_XDECREF(st);
  Py_DECREF(msg);
  if (exc) {
    PyErr_SetObject((PyObject*)Py_TYPE(exc), exc);
    Py_DECREF(exc);
  }
  return -1;
}

/* The first op call loads libdlfuse through the package's loader (it raises
 * dlfuse.LibraryNotFound with what it tried), so `import dlfuse` never fails for that. */
static int need_loaded(void) {
  if (S.mar) return 0;
  if (S.loader) {
    PyObject* r = PyObject_CallNoArgs(S.loader);
    if (!r) return -1;
    Py_DECREF(r);
    if (S.mar) return 0;
  }
  PyErr_SetString(PyExc_RuntimeError, "dlfuse._ext: load() has not run (import dlfuse, not dlfuse._ext)");
  return -1;
}

static PyObject* py_set_loader(PyObject* self, PyObject* fn) {
  (void)self;
  Py_XSETREF(S.loader, Py_NewRef(fn));
  Py_RETURN_NONE;
}

/* ---- arguments ----------------------------------------------------------------------------- */

/* Interned Python strings for the C names of the parameters, made once per name. The
 * names are static strings, so their address is the key. */
#define NAME_CACHE 64
static struct {
  const char* c;
  PyObject* py;
} g_names[NAME_CACHE];
static int g_nnames;
static PyObject* intern_name(const char* c) {
  for (int i = 0; i < g_nnames; ++i)
    if (g_names[i].c == c) return g_names[i].py;
  if (g_nnames == NAME_CACHE) return NULL;
  PyObject* py = PyUnicode_InternFromString(c);
  if (!py) {
    PyErr_Clear();
    return NULL;
  }
  g_names[g_nnames].c = c;
  g_names[g_nnames].py = py;
  return g_names[g_nnames++].py;
}

/* A vectorcall argument parser: names[i] for slot i; the first npos may be positional. */
static int parse_args(const char* fn, const char* const* names, int n, int npos, int nreq,
                      PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, PyObject** out) {
  for (int i = 0; i < n; ++i) out[i] = NULL;
  if (nargs > npos) {
    PyErr_Format(PyExc_TypeError, "%s() takes at most %d positional arguments (%zd given)", fn, npos, nargs);
    return -1;
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) out[i] = args[i];
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, k);
    int found = -1;
    for (int i = 0; i < n && found < 0; ++i) /* call sites' keywords are interned: identity first */
      if (key == intern_name(names[i])) found = i;
    for (int i = 0; i < n && found < 0; ++i)
      if (PyUnicode_CompareWithASCIIString(key, names[i]) == 0) found = i;
    if (found < 0) {
      PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fn, key);
      return -1;
    }
    if (out[found]) {
      PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fn, names[found]);
      return -1;
    }
    out[found] = args[nargs + k];
  }
  for (int i = 0; i < nreq; ++i)
    if (!out[i]) {
      PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fn, names[i]);
      return -1;
    }
  return 0;
}

static int is_none(PyObject* o) { return !o || o == Py_None; }

/* The stream argument -> the address handed to C (NULL: the plugin's default). */
static int parse_stream(PyObject* o, void** s, int* given) {
  *s = NULL;
  *given = 0;
  if (is_none(o)) return 0;
  *given = 1;
  if (PyLong_Check(o)) {
    *s = PyLong_AsVoidPtr(o);
    return PyErr_Occurred() ? -1 : 0;
  }
  PyObject* names[3] = {S.s_cuda_stream, S.s_ptr, S.s_handle};
  for (int i = 0; i < 3; ++i) {
    PyObject* v = PyObject_GetAttr(o, names[i]);
    if (!v) {
      PyErr_Clear();
      continue;
    }
    if (PyLong_Check(v)) {
      *s = PyLong_AsVoidPtr(v);
      Py_DECREF(v);
      return PyErr_Occurred() ? -1 : 0;
    }
    Py_DECREF(v);
  }
  PyErr_Format(PyExc_TypeError,
               "dlfuse: stream must be an int (a cudaStream_t / cl_command_queue address), None, or an "
               "object with .cuda_stream or .ptr; got %R",
               o);
  return -1;
}

static int parse_registry(PyObject* o, void** h) {
  if (is_none(o)) {
    if (!S.default_registry_obj) {
      PyObject* r = PyObject_CallNoArgs(S.default_registry);
      if (!r) return -1;
      S.default_registry_obj = r; /* the default registry lives as long as the process */
    }
    o = S.default_registry_obj;
  }
  PyObject* hv = PyObject_GetAttr(o, S.s_h);
  if (!hv) return -1;
  *h = hv == Py_None ? NULL : PyLong_AsVoidPtr(hv);
  Py_DECREF(hv);
  return PyErr_Occurred() ? -1 : 0;
}

static int parse_activation(PyObject* o, int* act) {
  if (is_none(o)) {
    *act = 1;
    return 0;
  }
  if (PyUnicode_Check(o)) {
    PyObject* v = PyDict_GetItemWithError(S.activations, o);
    if (!v) {
      if (!PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "dlfuse: activation must be one of %S, got %R", S.activation_names, o);
      return -1;
    }
    *act = (int)PyLong_AsLong(v);
    return 0;
  }
  PyObject* i = PyNumber_Long(o);
  if (!i) return -1;
  long a = PyLong_AsLong(i);
  Py_DECREF(i);
  if (a == -1 && PyErr_Occurred()) return -1;
  if (a < INT32_MIN || a > INT32_MAX) a = INT32_MAX; /* C refuses it by name */
  *act = (int)a;
  return 0;
}

static int parse_needs_n(PyObject* o, int* needs, int n) {
  for (int i = 0; i < n; ++i) needs[i] = 1;
  if (is_none(o)) return 0;
  PyObject* f = PySequence_Fast(o, "dlfuse: needs must be a sequence of booleans, one per gradient");
  if (!f) return -1;
  if (PySequence_Fast_GET_SIZE(f) != n) {
    PyErr_Format(PyExc_ValueError, "dlfuse: needs must be a sequence of %d booleans, got %zd", n,
                 PySequence_Fast_GET_SIZE(f));
    Py_DECREF(f);
    return -1;
  }
  for (int i = 0; i < n; ++i) {
    int t = PyObject_IsTrue(PySequence_Fast_GET_ITEM(f, i));
    if (t < 0) {
      Py_DECREF(f);
      return -1;
    }
    needs[i] = t;
  }
  Py_DECREF(f);
  return 0;
}

static int parse_needs(PyObject* o, int needs[3]) { return parse_needs_n(o, needs, 3); }

static int truthy(PyObject* o) { return is_none(o) ? 0 : PyObject_IsTrue(o); }

/* ---- shapes and allocation ------------------------------------------------------------------ */

typedef struct {
  int ndim;
  int64_t d[MAX_NDIM];
} Shape;

static void shape_of(const DLTensor* t, Shape* s) {
  s->ndim = t->ndim > MAX_NDIM ? MAX_NDIM : (t->ndim < 0 ? 0 : t->ndim);
  for (int i = 0; i < s->ndim; ++i) s->d[i] = t->shape ? t->shape[i] : 0;
}

/* NumPy broadcasting of n shapes given as (dims, ndim); 0 when incompatible. */
static int broadcast(Shape* out, int n, const int64_t* const* dims, const int* nds) {
  int nd = 0;
  for (int k = 0; k < n; ++k) {
    if (nds[k] < 0 || nds[k] > MAX_NDIM) return 0;
    if (nds[k] > nd) nd = nds[k];
  }
  out->ndim = nd;
  for (int i = 0; i < nd; ++i) {
    int64_t d = 1;
    for (int k = 0; k < n; ++k) {
      int j = i - (nd - nds[k]);
      if (j < 0) continue;
      int64_t s = dims[k][j];
      if (s != 1) {
        if (d != 1 && d != s) return 0;
        d = s;
      }
    }
    out->d[i] = d;
  }
  return 1;
}

#if DLFUSE_HAVE_EXCHANGE_API
static void alloc_set_error(void* ctx, const char* kind, const char* message) {
  (void)ctx;
  PyObject* exc = PyExc_RuntimeError;
  if (kind && strcmp(kind, "MemoryError") == 0) exc = PyExc_MemoryError;
  else if (kind && strcmp(kind, "ValueError") == 0) exc = PyExc_ValueError;
  else if (kind && strcmp(kind, "TypeError") == 0) exc = PyExc_TypeError;
  PyErr_SetString(exc, message ? message : "DLPack allocator failed");
}
#endif

static PyObject* shape_tuple(const Shape* s) {
  PyObject* t = PyTuple_New(s->ndim);
  if (!t) return NULL;
  for (int i = 0; i < s->ndim; ++i) {
    PyObject* v = PyLong_FromLongLong(s->d[i]);
    if (!v) {
      Py_DECREF(t);
      return NULL;
    }
    PyTuple_SET_ITEM(t, i, v);
  }
  return t;
}

/* A new tensor of `shape` with like's dtype and device, from like's framework. */
static PyObject* alloc_like(PyObject* like, const View* lv, const Shape* shape, PyObject* registry) {
  const DLTensor* lt = lv->t;
#if DLFUSE_HAVE_EXCHANGE_API
  if (lv->api) {
    DLTensor proto;
    memset(&proto, 0, sizeof proto);
    proto.device = lt->device;
    proto.dtype = lt->dtype;
    proto.ndim = shape->ndim;
    proto.shape = (int64_t*)shape->d;
    DLManagedTensorVersioned* m = NULL;
    if (lv->api->managed_tensor_allocator(&proto, &m, NULL, alloc_set_error) != 0 || !m) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "dlfuse: the framework's DLPack allocator failed");
      return NULL;
    }
    void* out = NULL;
    if (lv->api->managed_tensor_to_py_object_no_sync(m, &out) != 0) return NULL;
    return (PyObject*)out;
  }
#endif
  PyObject* st = shape_tuple(shape);
  if (!st) return NULL;
  PyObject* r;
  if (Py_TYPE(like) == S.ndarray && lt->device.device_type == kDLCPU && S.numpy_empty) {
    PyObject* dt = PyObject_GetAttr(like, S.s_dtype);
    if (!dt) {
      Py_DECREF(st);
      return NULL;
    }
    PyObject* a[2] = {st, dt};
    r = PyObject_Vectorcall(S.numpy_empty, a, 1, S.kw_dtype);
    Py_DECREF(dt);
  } else {
    r = PyObject_CallFunction(S.alloc_fallback, "OOiiiiO", like, st, (int)lt->dtype.code,
                              (int)lt->dtype.bits, (int)lt->device.device_type, (int)lt->device.device_id,
                              registry ? registry : Py_None);
  }
  Py_DECREF(st);
  return r;
}

/* dlfuse.Tensor outputs remember the stream that wrote them (their __dlpack__ syncs it). */
static int mark_written(PyObject* o, void* stream) {
  if (!o || !S.tensor_type || !PyObject_TypeCheck(o, (PyTypeObject*)S.tensor_type)) return 0;
  PyObject* s = stream ? PyLong_FromVoidPtr(stream) : Py_NewRef(Py_None);
  if (!s) return -1;
  int rc = PyObject_SetAttr(o, S.s_stream, s);
  Py_DECREF(s);
  if (rc == 0) rc = PyObject_SetAttr(o, S.s_written, Py_True);
  return rc;
}

/* The stream of the call: the caller's, else the framework's current work stream for the
 * first tensor on a stream device whose type has an exchange API (torch's current stream),
 * else NULL (the plugin's default). */
static int pick_stream(const View* v, int given, void** stream) {
#if DLFUSE_HAVE_EXCHANGE_API
  if (given || !v->api || !is_stream_device(v->t->device.device_type)) return 0;
  if (v->api->current_work_stream(v->t->device.device_type, v->t->device.device_id, stream) != 0) return -1;
#else
  (void)v;
  (void)given;
  (void)stream;
#endif
  return 0;
}

#define NVIEWS 8
static void release_all(View* vs, int n) {
  for (int i = 0; i < n; ++i) view_release(&vs[i]);
}

/* ---- the ops ------------------------------------------------------------------------------ */

/* The shape of a @ b: broadcast batch dims + [M, N]. Operands the registry will refuse
 * (1-D, too many dims) give some shape; the call then fails with the registry's message. */
static void matmul_out_shape(const DLTensor* a, const DLTensor* b, Shape* sh) {
  if (a->ndim >= 2 && b->ndim >= 2 && a->ndim <= MAX_NDIM && b->ndim <= MAX_NDIM) {
    const int64_t* dims[2] = {a->shape, b->shape};
    int nds[2] = {a->ndim - 2, b->ndim - 2};
    if (!broadcast(sh, 2, dims, nds)) {
      sh->ndim = a->ndim - 2;
      memcpy(sh->d, a->shape, sizeof(int64_t) * (size_t)sh->ndim);
    }
    if (sh->ndim + 2 > MAX_NDIM) sh->ndim = MAX_NDIM - 2;
    sh->d[sh->ndim++] = a->shape[a->ndim - 2];
    sh->d[sh->ndim++] = b->shape[b->ndim - 1];
  } else {
    sh->ndim = 1; /* the registry refuses 1-D operands and says so */
    sh->d[0] = 0;
  }
}

/* An ABI 1.1 function of libdlfuse, or a raised NotImplementedError naming it. */
static int need_v11(const void* fn, const char* name) {
  if (fn) return 0;
  PyErr_Format(PyExc_NotImplementedError,
               "dlfuse: %s needs libdlfuse of ABI >= 1.1; the loaded library is older", name);
  return -1;
}

/* The end of a forward call: the status raised (then the views released), or the views
 * released and `out` marked written and returned. Takes the reference to out. */
static PyObject* finish_out(int st, View* v, int nv, PyObject* out, void* s) {
  if (st) raise_status(st, NULL);
  release_all(v, nv);
  if (st || mark_written(out, s) < 0) {
    Py_DECREF(out);
    return NULL;
  }
  return out;
}

static PyObject* py_matmul_add_relu(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwn) {
  (void)self;
  static const char* const names[] = {"a", "b", "bias", "out", "stream", "allow_tf32", "registry"};
  PyObject* p[7];
  if (need_loaded() < 0 || parse_args("matmul_add_relu", names, 7, 5, 3, args, nargs, kwn, p) < 0) return NULL;
  void* h;
  void* s;
  int given;
  int tf32 = truthy(p[5]);
  if (tf32 < 0 || parse_registry(p[6], &h) < 0 || parse_stream(p[4], &s, &given) < 0) return NULL;
  View v[4];
  memset(v, 0, sizeof v);
  PyObject* out = NULL;
  if (view_import(p[0], "a", s, &v[0]) < 0 || pick_stream(&v[0], given, &s) < 0 ||
      view_import(p[1], "b", s, &v[1]) < 0 || view_import(p[2], "bias", s, &v[2]) < 0)
    goto fail;
  if (is_none(p[3])) {
    Shape sh;
    matmul_out_shape(v[0].t, v[1].t, &sh);
    out = alloc_like(p[0], &v[0], &sh, p[6]);
  } else {
    out = Py_NewRef(p[3]);
  }
  if (!out || view_import_out(out, "out", s, &v[3]) < 0) goto fail;
  int st;
  Py_BEGIN_ALLOW_THREADS
  st = S.mar((dlfuse_registry_t)h, v[0].t, v[1].t, v[2].t, v[3].t, tf32, s);
  Py_END_ALLOW_THREADS
  return finish_out(st, v, 4, out, s);
fail:
  release_all(v, 4);
  Py_XDECREF(out);
  return NULL;
}

static PyObject* py_add_mul_activation(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwn) {
  (void)self;
  static const char* const names[] = {"x", "y", "bias", "multiplier", "activation", "out", "stream", "registry"};
  PyObject* p[8];
  if (need_loaded() < 0 || parse_args("add_mul_activation", names, 8, 7, 3, args, nargs, kwn, p) < 0) return NULL;
  void* h;
  void* s;
  int given, act;
  double m = 1.0;
  if (!is_none(p[3])) {
    m = PyFloat_AsDouble(p[3]);
    if (m == -1.0 && PyErr_Occurred()) return NULL;
  }
  if (parse_activation(p[4], &act) < 0 || parse_registry(p[7], &h) < 0 || parse_stream(p[6], &s, &given) < 0)
    return NULL;
  View v[4];
  memset(v, 0, sizeof v);
  PyObject* out = NULL;
  DLTensor* to = NULL;
  if (view_import(p[0], "x", s, &v[0]) < 0 || pick_stream(&v[0], given, &s) < 0 ||
      view_import(p[1], "y", s, &v[1]) < 0 || view_import(p[2], "bias", s, &v[2]) < 0)
    goto fail;
  if (is_none(p[5])) {
    Shape sh;
    const int64_t* dims[3] = {v[0].t->shape, v[1].t->shape, v[2].t->shape};
    int nds[3] = {v[0].t->ndim, v[1].t->ndim, v[2].t->ndim};
    if (!broadcast(&sh, 3, dims, nds)) shape_of(v[0].t, &sh);
    out = alloc_like(p[0], &v[0], &sh, p[7]);
    if (!out || view_import_out(out, "out", s, &v[3]) < 0) goto fail;
    to = v[3].t;
  } else if (p[5] == p[0]) {
    out = Py_NewRef(p[5]);
    if (v[0].read_only) {
      raise_status(1, "out: expected a writable tensor, got one the producer exported as read-only");
      goto fail;
    }
    to = v[0].t;
  } else {
    out = Py_NewRef(p[5]);
    if (view_import_out(out, "out", s, &v[3]) < 0) goto fail;
    to = v[3].t;
  }
  int st;
  Py_BEGIN_ALLOW_THREADS
  st = S.amc((dlfuse_registry_t)h, v[0].t, v[1].t, v[2].t, m, (dlfuse_activation_t)act, to, s);
  Py_END_ALLOW_THREADS
  return finish_out(st, v, 4, out, s);
fail:
  release_all(v, 4);
  Py_XDECREF(out);
  return NULL;
}

/* Backward: the three gradients, given or allocated like grad_out where needed. */
static PyObject* finish_grads_n(PyObject** res, int n, void* s) {
  PyObject* t = PyTuple_New(n);
  if (!t) return NULL;
  for (int i = 0; i < n; ++i) {
    PyObject* r = res[i] ? res[i] : Py_NewRef(Py_None);
    res[i] = NULL;
    if (mark_written(r, s) < 0) {
      Py_DECREF(r);
      Py_DECREF(t);
      return NULL;
    }
    PyTuple_SET_ITEM(t, i, r);
  }
  return t;
}

static PyObject* finish_grads(PyObject* res[3], void* s) { return finish_grads_n(res, 3, s); }

static int parse_shape(PyObject* o, const char* what, Shape* sh) {
  PyObject* f = PySequence_Fast(o, what);
  if (!f) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(f);
  if (n > MAX_NDIM) {
    Py_DECREF(f);
    PyErr_Format(PyExc_ValueError, "dlfuse: a shape argument has %zd dims (at most %d)", n, MAX_NDIM);
    return -1;
  }
  sh->ndim = (int)n;
  for (Py_ssize_t i = 0; i < n; ++i) {
    sh->d[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(f, i));
    if (sh->d[i] == -1 && PyErr_Occurred()) {
      Py_DECREF(f);
      return -1;
    }
  }
  Py_DECREF(f);
  return 0;
}

static PyObject* py_matmul_add_relu_backward(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                                             PyObject* kwn) {
  (void)self;
  static const char* const names[] = {"grad_out", "a", "b", "out", "bias_shape", "needs", "grad_a",
                                      "grad_b", "grad_bias", "stream", "allow_tf32", "registry"};
  static const char* const gnames[] = {"grad_a", "grad_b", "grad_bias"};
  PyObject* p[12];
  if (need_loaded() < 0 || parse_args("matmul_add_relu_backward", names, 12, 4, 4, args, nargs, kwn, p) < 0)
    return NULL;
  void* h;
  void* s;
  int given, needs[3];
  int tf32 = truthy(p[10]);
  if (tf32 < 0 || parse_needs(p[5], needs) < 0 || parse_registry(p[11], &h) < 0 ||
      parse_stream(p[9], &s, &given) < 0)
    return NULL;
  View v[7];
  memset(v, 0, sizeof v);
  PyObject* res[3] = {NULL, NULL, NULL};
  if (view_import(p[0], "grad_out", s, &v[0]) < 0 || pick_stream(&v[0], given, &s) < 0 ||
      view_import(p[1], "a", s, &v[1]) < 0 || view_import(p[2], "b", s, &v[2]) < 0 ||
      view_import(p[3], "out", s, &v[3]) < 0)
    goto fail;
  for (int i = 0; i < 3; ++i) {
    PyObject* g = p[6 + i];
    if (!is_none(g)) {
      res[i] = Py_NewRef(g);
    } else if (needs[i]) {
      Shape sh;
      if (i < 2) {
        shape_of(v[1 + i].t, &sh);
      } else if (!is_none(p[4])) {
        if (parse_shape(p[4], "dlfuse: bias_shape must be a sequence of ints", &sh) < 0) goto fail;
      } else if (v[3].t->ndim > 0) {
        sh.ndim = 1;
        sh.d[0] = v[3].t->shape[v[3].t->ndim - 1];
      } else {
        sh.ndim = 0;
      }
      res[i] = alloc_like(p[0], &v[0], &sh, p[11]);
      if (!res[i]) goto fail;
    }
    if (res[i] && view_import_out(res[i], gnames[i], s, &v[4 + i]) < 0) goto fail;
  }
  int st;
  Py_BEGIN_ALLOW_THREADS
  st = S.mar_bwd((dlfuse_registry_t)h, v[0].t, v[1].t, v[2].t, v[3].t, v[4].t, v[5].t, v[6].t, tf32, s);
  Py_END_ALLOW_THREADS
  if (st) {
    raise_status(st, NULL);
    goto fail;
  }
  release_all(v, 7);
  return finish_grads(res, s);
fail:
  release_all(v, 7);
  for (int i = 0; i < 3; ++i) Py_XDECREF(res[i]);
  return NULL;
}

/* A gradient output: the given tensor, or one allocated like `like` with shape `sh` when
 * needed, or none. Imported as an output view when present. */
static int take_grad(PyObject* given, int need, const Shape* sh, PyObject* like, const View* lv, PyObject* reg,
                     const char* name, void* s, PyObject** res, View* v) {
  if (!is_none(given)) {
    *res = Py_NewRef(given);
  } else if (need) {
    *res = alloc_like(like, lv, sh, reg);
    if (!*res) return -1;
  }
  if (*res && view_import_out(*res, name, s, v) < 0) return -1;
  return 0;
}

/* A shape argument, or when it is None the last dim of `t` ([N], a row bias), or all of t. */
static int shape_or_default(PyObject* o, const char* what, const DLTensor* t, int row, Shape* sh) {
  if (!is_none(o)) return parse_shape(o, what, sh);
  if (row && t->ndim > 0) {
    sh->ndim = 1;
    sh->d[0] = t->shape[t->ndim - 1];
  } else {
    shape_of(t, sh);
  }
  return 0;
}

/* add_mul_activation_backward(grad_out, x, y, bias, multiplier, activation, needs=None, grad_x=None,
 * grad_y=None, grad_bias=None, stream=None, registry=None, out=None, x_shape=None, y_shape=None,
 * bias_shape=None): from x, y and bias, or (ABI 1.1) from out with x, y, bias None, the
 * gradients' shapes then given by the *_shape arguments (default: out's shape, [N] for bias). */
static PyObject* py_add_mul_activation_backward(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                                                PyObject* kwn) {
  (void)self;
  static const char* const names[] = {"grad_out", "x", "y", "bias", "multiplier", "activation", "needs",
                                      "grad_x", "grad_y", "grad_bias", "stream", "registry", "out", "x_shape",
                                      "y_shape", "bias_shape"};
  static const char* const gnames[] = {"grad_x", "grad_y", "grad_bias"};
  PyObject* p[16];
  if (need_loaded() < 0 ||
      parse_args("add_mul_activation_backward", names, 16, 6, 1, args, nargs, kwn, p) < 0)
    return NULL;
  const int from_out = !is_none(p[12]);
  if (from_out && (!is_none(p[1]) || !is_none(p[2]) || !is_none(p[3]))) {
    PyErr_SetString(PyExc_ValueError,
                    "dlfuse: add_mul_activation_backward: pass either x, y and bias, or out (then x, y, bias None)");
    return NULL;
  }
  if (from_out && need_v11((const void*)S.amc_bwd_out, "add_mul_activation_backward(out=...)") < 0) return NULL;
  for (int i = 1; i <= 3 && !from_out; ++i)
    if (!p[i]) {
      PyErr_Format(PyExc_TypeError, "add_mul_activation_backward() missing required argument '%s'", names[i]);
      return NULL;
    }
  void* h;
  void* s;
  int given, act, needs[3];
  double m = 1.0;
  if (!is_none(p[4])) {
    m = PyFloat_AsDouble(p[4]);
    if (m == -1.0 && PyErr_Occurred()) return NULL;
  }
  if (parse_activation(p[5], &act) < 0 || parse_needs(p[6], needs) < 0 || parse_registry(p[11], &h) < 0 ||
      parse_stream(p[10], &s, &given) < 0)
    return NULL;
  View v[7];
  memset(v, 0, sizeof v);
  PyObject* res[3] = {NULL, NULL, NULL};
  if (view_import(p[0], "grad_out", s, &v[0]) < 0 || pick_stream(&v[0], given, &s) < 0) goto fail;
  if (from_out ? view_import(p[12], "out", s, &v[1]) < 0
               : (view_import(p[1], "x", s, &v[1]) < 0 || view_import(p[2], "y", s, &v[2]) < 0 ||
                  view_import(p[3], "bias", s, &v[3]) < 0))
    goto fail;
  for (int i = 0; i < 3; ++i) {
    Shape sh;
    if (!from_out) shape_of(v[1 + i].t, &sh);
    else if (shape_or_default(p[13 + i], "dlfuse: x_shape, y_shape and bias_shape must be sequences of ints",
                              v[1].t, i == 2, &sh) < 0)
      goto fail;
    if (take_grad(p[7 + i], needs[i], &sh, p[0], &v[0], p[11], gnames[i], s, &res[i], &v[4 + i]) < 0) goto fail;
  }
  int st;
  Py_BEGIN_ALLOW_THREADS
  if (from_out)
    st = S.amc_bwd_out((dlfuse_registry_t)h, v[0].t, v[1].t, m, (dlfuse_activation_t)act, v[4].t, v[5].t, v[6].t,
                       s);
  else
    st = S.amc_bwd((dlfuse_registry_t)h, v[0].t, v[1].t, v[2].t, v[3].t, m, (dlfuse_activation_t)act, v[4].t,
                   v[5].t, v[6].t, s);
  Py_END_ALLOW_THREADS
  if (st) {
    raise_status(st, NULL);
    goto fail;
  }
  release_all(v, 7);
  return finish_grads(res, s);
fail:
  release_all(v, 7);
  for (int i = 0; i < 3; ++i) Py_XDECREF(res[i]);
  return NULL;
}

/* ---- the ops of ABI 1.1 ------------------------------------------------------------------------ */

/* matmul_add_activation(a, b, bias, activation, out=None, pre=None, stream=None, allow_tf32=False,
 * registry=None): out, or (out, pre) when pre is True or a tensor. */
static PyObject* py_matmul_add_activation(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwn) {
  (void)self;
  static const char* const names[] = {"a", "b", "bias", "activation", "out", "pre", "stream", "allow_tf32",
                                      "registry"};
  PyObject* p[9];
  if (need_loaded() < 0 || need_v11((const void*)S.maa, "matmul_add_activation") < 0 ||
      parse_args("matmul_add_activation", names, 9, 6, 4, args, nargs, kwn, p) < 0)
    return NULL;
  void* h;
  void* s;
  int given, act;
  int tf32 = truthy(p[7]);
  const int want_pre = p[5] == Py_True;
  if (tf32 < 0 || parse_activation(p[3], &act) < 0 || parse_registry(p[8], &h) < 0 ||
      parse_stream(p[6], &s, &given) < 0)
    return NULL;
  View v[5];
  memset(v, 0, sizeof v);
  PyObject *out = NULL, *pre = NULL;
  if (view_import(p[0], "a", s, &v[0]) < 0 || pick_stream(&v[0], given, &s) < 0 ||
      view_import(p[1], "b", s, &v[1]) < 0 || view_import(p[2], "bias", s, &v[2]) < 0)
    goto fail;
  Shape sh;
  matmul_out_shape(v[0].t, v[1].t, &sh);
  if (take_grad(p[4], 1, &sh, p[0], &v[0], p[8], "out", s, &out, &v[3]) < 0 ||
      take_grad(want_pre || p[5] == Py_False ? Py_None : p[5], want_pre, &sh, p[0], &v[0], p[8], "pre", s, &pre,
                &v[4]) < 0)
    goto fail;
  int st;
  Py_BEGIN_ALLOW_THREADS
  st = S.maa((dlfuse_registry_t)h, v[0].t, v[1].t, v[2].t, (dlfuse_activation_t)act, v[3].t, v[4].t, tf32, s);
  Py_END_ALLOW_THREADS
  if (!pre) return finish_out(st, v, 5, out, s);
  if (st) {
    raise_status(st, NULL);
    goto fail;
  }
  release_all(v, 5);
  PyObject* res[2] = {out, pre};
  return finish_grads_n(res, 2, s);
fail:
  release_all(v, 5);
  Py_XDECREF(out);
  Py_XDECREF(pre);
  return NULL;
}

/* matmul_add_activation_backward(grad_out, a, b, activation, out=None, pre=None, bias_shape=None,
 * needs=None, grad_a=None, grad_b=None, grad_bias=None, stream=None, allow_tf32=False, registry=None) */
static PyObject* py_matmul_add_activation_backward(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                                                   PyObject* kwn) {
  (void)self;
  static const char* const names[] = {"grad_out", "a", "b", "activation", "out", "pre", "bias_shape", "needs",
                                      "grad_a", "grad_b", "grad_bias", "stream", "allow_tf32", "registry"};
  static const char* const gnames[] = {"grad_a", "grad_b", "grad_bias"};
  PyObject* p[14];
  if (need_loaded() < 0 || need_v11((const void*)S.maa_bwd, "matmul_add_activation_backward") < 0 ||
      parse_args("matmul_add_activation_backward", names, 14, 6, 4, args, nargs, kwn, p) < 0)
    return NULL;
  void* h;
  void* s;
  int given, act, needs[3];
  int tf32 = truthy(p[12]);
  if (tf32 < 0 || parse_activation(p[3], &act) < 0 || parse_needs(p[7], needs) < 0 ||
      parse_registry(p[13], &h) < 0 || parse_stream(p[11], &s, &given) < 0)
    return NULL;
  View v[8];
  memset(v, 0, sizeof v);
  PyObject* res[3] = {NULL, NULL, NULL};
  if (view_import(p[0], "grad_out", s, &v[0]) < 0 || pick_stream(&v[0], given, &s) < 0 ||
      view_import(p[1], "a", s, &v[1]) < 0 || view_import(p[2], "b", s, &v[2]) < 0 ||
      (!is_none(p[4]) && view_import(p[4], "out", s, &v[3]) < 0) ||
      (!is_none(p[5]) && view_import(p[5], "pre", s, &v[4]) < 0))
    goto fail;
  for (int i = 0; i < 3; ++i) {
    Shape sh;
    if (i < 2) shape_of(v[1 + i].t, &sh);
    else if (shape_or_default(p[6], "dlfuse: bias_shape must be a sequence of ints", v[0].t, 1, &sh) < 0) goto fail;
    if (take_grad(p[8 + i], needs[i], &sh, p[0], &v[0], p[13], gnames[i], s, &res[i], &v[5 + i]) < 0) goto fail;
  }
  int st;
  Py_BEGIN_ALLOW_THREADS
  st = S.maa_bwd((dlfuse_registry_t)h, v[0].t, v[1].t, v[2].t, v[3].t, v[4].t, (dlfuse_activation_t)act, v[5].t,
                 v[6].t, v[7].t, tf32, s);
  Py_END_ALLOW_THREADS
  if (st) {
    raise_status(st, NULL);
    goto fail;
  }
  release_all(v, 8);
  return finish_grads(res, s);
fail:
  release_all(v, 8);
  for (int i = 0; i < 3; ++i) Py_XDECREF(res[i]);
  return NULL;
}

/* matmul_add_residual(a, b, bias, residual, out=None, stream=None, allow_tf32=False, registry=None);
 * out may be residual itself (in place). */
static PyObject* py_matmul_add_residual(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwn) {
  (void)self;
  static const char* const names[] = {"a", "b", "bias", "residual", "out", "stream", "allow_tf32", "registry"};
  PyObject* p[8];
  if (need_loaded() < 0 || need_v11((const void*)S.mres, "matmul_add_residual") < 0 ||
      parse_args("matmul_add_residual", names, 8, 5, 4, args, nargs, kwn, p) < 0)
    return NULL;
  void* h;
  void* s;
  int given;
  int tf32 = truthy(p[6]);
  if (tf32 < 0 || parse_registry(p[7], &h) < 0 || parse_stream(p[5], &s, &given) < 0) return NULL;
  View v[5];
  memset(v, 0, sizeof v);
  PyObject* out = NULL;
  DLTensor* to = NULL;
  if (view_import(p[0], "a", s, &v[0]) < 0 || pick_stream(&v[0], given, &s) < 0 ||
      view_import(p[1], "b", s, &v[1]) < 0 || view_import(p[2], "bias", s, &v[2]) < 0 ||
      view_import(p[3], "residual", s, &v[3]) < 0)
    goto fail;
  if (!is_none(p[4]) && p[4] == p[3]) { /* in place: one view, which must be writable */
    out = Py_NewRef(p[4]);
    if (v[3].read_only) {
      raise_status(1, "out: expected a writable tensor, got one the producer exported as read-only");
      goto fail;
    }
    to = v[3].t;
  } else {
    Shape sh;
    matmul_out_shape(v[0].t, v[1].t, &sh);
    if (take_grad(p[4], 1, &sh, p[0], &v[0], p[7], "out", s, &out, &v[4]) < 0) goto fail;
    to = v[4].t;
  }
  int st;
  Py_BEGIN_ALLOW_THREADS
  st = S.mres((dlfuse_registry_t)h, v[0].t, v[1].t, v[2].t, v[3].t, to, tf32, s);
  Py_END_ALLOW_THREADS
  return finish_out(st, v, 5, out, s);
fail:
  release_all(v, 5);
  Py_XDECREF(out);
  return NULL;
}

/* matmul_add_residual_backward(grad_out, a, b, bias_shape=None, residual_shape=None, needs=None,
 * grad_a=None, grad_b=None, grad_bias=None, grad_residual=None, stream=None, allow_tf32=False,
 * registry=None) -> (grad_a, grad_b, grad_bias, grad_residual) */
static PyObject* py_matmul_add_residual_backward(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                                                 PyObject* kwn) {
  (void)self;
  static const char* const names[] = {"grad_out", "a", "b", "bias_shape", "residual_shape", "needs", "grad_a",
                                      "grad_b", "grad_bias", "grad_residual", "stream", "allow_tf32", "registry"};
  static const char* const gnames[] = {"grad_a", "grad_b", "grad_bias", "grad_residual"};
  PyObject* p[13];
  if (need_loaded() < 0 || need_v11((const void*)S.mres_bwd, "matmul_add_residual_backward") < 0 ||
      parse_args("matmul_add_residual_backward", names, 13, 5, 3, args, nargs, kwn, p) < 0)
    return NULL;
  void* h;
  void* s;
  int given, needs[4];
  int tf32 = truthy(p[11]);
  if (tf32 < 0 || parse_needs_n(p[5], needs, 4) < 0 || parse_registry(p[12], &h) < 0 ||
      parse_stream(p[10], &s, &given) < 0)
    return NULL;
  View v[7];
  memset(v, 0, sizeof v);
  PyObject* res[4] = {NULL, NULL, NULL, NULL};
  if (view_import(p[0], "grad_out", s, &v[0]) < 0 || pick_stream(&v[0], given, &s) < 0 ||
      view_import(p[1], "a", s, &v[1]) < 0 || view_import(p[2], "b", s, &v[2]) < 0)
    goto fail;
  for (int i = 0; i < 4; ++i) {
    Shape sh;
    if (i < 2) shape_of(v[1 + i].t, &sh);
    else if (shape_or_default(p[i + 1], "dlfuse: bias_shape and residual_shape must be sequences of ints",
                              v[0].t, i == 2, &sh) < 0)
      goto fail;
    if (take_grad(p[6 + i], needs[i], &sh, p[0], &v[0], p[12], gnames[i], s, &res[i], &v[3 + i]) < 0) goto fail;
  }
  int st;
  Py_BEGIN_ALLOW_THREADS
  st = S.mres_bwd((dlfuse_registry_t)h, v[0].t, v[1].t, v[2].t, v[3].t, v[4].t, v[5].t, v[6].t, tf32, s);
  Py_END_ALLOW_THREADS
  if (st) {
    raise_status(st, NULL);
    goto fail;
  }
  release_all(v, 7);
  return finish_grads_n(res, 4, s);
fail:
  release_all(v, 7);
  for (int i = 0; i < 4; ++i) Py_XDECREF(res[i]);
  return NULL;
}

/* ---- set-up ----------------------------------------------------------------------------------- */

/* load(path, errors, tensor_type, alloc_fallback, default_registry, activations) */
/* ---- any op by name (ABI 1.2) ------------------------------------------------------------- */

/* One attribute from Python: its schema entry found by name (any case), the value converted
 * to the schema's type. */
static int generic_attr(const dlfuse_op_schema_t* sc, PyObject* key, PyObject* value, dlfuse_attr_t* a) {
  const char* k = PyUnicode_AsUTF8(key);
  if (!k) return -1;
  for (int32_t i = 0; i < sc->num_attrs; ++i) {
    if (strcasecmp(sc->attrs[i].name, k) != 0) continue;
    *a = sc->attrs[i].default_value;
    if (a->type == DLFUSE_ATTR_FLOAT64) {
      a->value.f64 = PyFloat_AsDouble(value);
    } else {
      if (PyFloat_Check(value)) {
        PyErr_Format(PyExc_TypeError, "%s(): attribute %s: expected an int, got a float", sc->name, sc->attrs[i].name);
        return -1;
      }
      a->value.i64 = PyLong_AsLongLong(value);
    }
    return PyErr_Occurred() ? -1 : 0;
  }
  PyObject* names = PyList_New(0);
  for (int32_t i = 0; names && i < sc->num_attrs; ++i) {
    PyObject* n = PyUnicode_FromString(sc->attrs[i].name);
    if (!n || PyList_Append(names, n) < 0) Py_CLEAR(names);
    Py_XDECREF(n);
  }
  if (names) PyErr_Format(PyExc_TypeError, "%s() got an unexpected attribute '%s'; expected one of %R", sc->name, k, names);
  Py_XDECREF(names);
  return -1;
}

/* call(op, inputs, attrs, out, stream, registry): op by name; inputs a tuple (None where an
 * optional input is absent); attrs a dict; out None or a sequence (None entries allocated).
 * Outputs are allocated like the first input, with the shapes the registry infers. */
static PyObject* py_call(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  if (need_loaded() < 0) return NULL;
  if (!S.op_get || !S.op_schema || !S.op_infer || !S.op_call) {
    PyErr_SetString(PyExc_NotImplementedError, "dlfuse: call() needs libdlfuse of ABI >= 1.2; the loaded library is older");
    return NULL;
  }
  if (nargs != 6 || !PyUnicode_Check(args[0]) || !PyTuple_Check(args[1]) || !PyDict_Check(args[2])) {
    PyErr_SetString(PyExc_TypeError, "_ext.call(op: str, inputs: tuple, attrs: dict, out, stream, registry)");
    return NULL;
  }
  const char* name = PyUnicode_AsUTF8(args[0]);
  void* h;
  void* s;
  int given;
  if (!name || parse_registry(args[5], &h) < 0 || parse_stream(args[4], &s, &given) < 0) return NULL;
  dlfuse_op_t op = NULL;
  int st = S.op_get((dlfuse_registry_t)h, name, &op);
  if (st) return raise_status(st, NULL), NULL;
  dlfuse_op_schema_t sc;
  memset(&sc, 0, sizeof sc);
  sc.struct_size = sizeof sc;
  st = S.op_schema(op, &sc);
  if (st) return raise_status(st, NULL), NULL;
  const Py_ssize_t nin = PyTuple_GET_SIZE(args[1]);
  if (nin != sc.num_inputs) {
    PyErr_Format(PyExc_TypeError, "%s() takes %d inputs (%zd given)", sc.name, sc.num_inputs, nin);
    return NULL;
  }
  PyObject* out_seq = NULL;
  if (!is_none(args[3])) {
    out_seq = PySequence_Fast(args[3], "out: expected a sequence of tensors (None where to allocate)");
    if (!out_seq) return NULL;
    if (PySequence_Fast_GET_SIZE(out_seq) != sc.num_outputs) {
      PyErr_Format(PyExc_TypeError, "%s(): out: expected %d entries, got %zd", sc.name, sc.num_outputs,
                   PySequence_Fast_GET_SIZE(out_seq));
      Py_DECREF(out_seq);
      return NULL;
    }
  }
  dlfuse_attr_t attrs[DLFUSE_MAX_ATTRS];
  int32_t nattrs = 0;
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  while (PyDict_Next(args[2], &pos, &key, &value)) {
    if (nattrs >= DLFUSE_MAX_ATTRS || generic_attr(&sc, key, value, &attrs[nattrs]) < 0) {
      if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "%s(): too many attributes", sc.name);
      Py_XDECREF(out_seq);
      return NULL;
    }
    ++nattrs;
  }
  View v[2 * DLFUSE_MAX_ARGS];
  memset(v, 0, sizeof v);
  const DLTensor* in[DLFUSE_MAX_ARGS];
  DLTensor* outs[DLFUSE_MAX_ARGS];
  PyObject* res[DLFUSE_MAX_ARGS] = {NULL};
  int first = -1;
  int nv = 0;
  for (Py_ssize_t i = 0; i < nin; ++i) {
    PyObject* o = PyTuple_GET_ITEM(args[1], i);
    in[i] = NULL;
    if (is_none(o)) continue;
    if (view_import(o, sc.inputs[i].name, s, &v[i]) < 0) goto fail;
    nv = (int)i + 1;
    in[i] = v[i].t;
    if (first < 0) {
      first = (int)i;
      if (pick_stream(&v[i], given, &s) < 0) goto fail;
    }
  }
  nv = (int)nin;
  {
    int32_t ndims[DLFUSE_MAX_ARGS];
    int64_t shapes[DLFUSE_MAX_ARGS * DLFUSE_MAX_NDIM];
    DLDataType dtypes[DLFUSE_MAX_ARGS];
    st = S.op_infer(op, in, (int32_t)nin, attrs, nattrs, sc.num_outputs, ndims, shapes, dtypes);
    if (st) {
      raise_status(st, NULL);
      goto fail;
    }
    for (int32_t i = 0; i < sc.num_outputs; ++i) {
      PyObject* given_out = out_seq ? PySequence_Fast_GET_ITEM(out_seq, i) : Py_None;
      if (!is_none(given_out)) {
        res[i] = Py_NewRef(given_out);
      } else {
        if (first < 0) {
          PyErr_Format(PyExc_TypeError, "%s(): no input to allocate outputs like; pass out=", sc.name);
          goto fail;
        }
        Shape sh;
        sh.ndim = ndims[i];
        memcpy(sh.d, shapes + (size_t)i * DLFUSE_MAX_NDIM, sizeof(int64_t) * (size_t)ndims[i]);
        res[i] = alloc_like(PyTuple_GET_ITEM(args[1], first), &v[first], &sh, args[5]);
        if (!res[i]) goto fail;
      }
      if (view_import_out(res[i], sc.outputs[i].name, s, &v[nin + i]) < 0) goto fail;
      nv = (int)nin + i + 1;
      outs[i] = v[nin + i].t;
    }
  }
  Py_BEGIN_ALLOW_THREADS
  st = S.op_call(op, in, (int32_t)nin, outs, sc.num_outputs, attrs, nattrs, s);
  Py_END_ALLOW_THREADS
  if (st) {
    raise_status(st, NULL);
    goto fail;
  }
  release_all(v, nv);
  Py_XDECREF(out_seq);
  for (int32_t i = 0; i < sc.num_outputs; ++i)
    if (mark_written(res[i], s) < 0) {
      for (int32_t j = 0; j < sc.num_outputs; ++j) Py_XDECREF(res[j]);
      return NULL;
    }
  if (sc.num_outputs == 1) return res[0];
  PyObject* t = PyTuple_New(sc.num_outputs);
  if (!t) {
    for (int32_t j = 0; j < sc.num_outputs; ++j) Py_XDECREF(res[j]);
    return NULL;
  }
  for (int32_t i = 0; i < sc.num_outputs; ++i) PyTuple_SET_ITEM(t, i, res[i]);
  return t;
fail:
  release_all(v, nv);
  Py_XDECREF(out_seq);
  for (int32_t j = 0; j < DLFUSE_MAX_ARGS; ++j) Py_XDECREF(res[j]);
  return NULL;
}

static PyObject* py_load(PyObject* self, PyObject* args) {
  (void)self;
  const char* path;
  PyObject *errors, *tensor_type, *fallback, *defreg, *acts;
  if (!PyArg_ParseTuple(args, "sO!OOOO!", &path, &PyTuple_Type, &errors, &tensor_type, &fallback, &defreg,
                        &PyDict_Type, &acts))
    return NULL;
  /* RTLD_NOLOAD first: the ctypes side opened this path already, share its handle. */
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!lib) lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    PyErr_Format(PyExc_OSError, "dlfuse._ext: dlopen(%s): %s", path, e ? e : "failed");
    return NULL;
  }
  const char* syms[] = {"dlfuse_matmul_add_relu", "dlfuse_matmul_add_relu_backward", "dlfuse_add_mul_activation",
                        "dlfuse_add_mul_activation_backward", "dlfuse_last_error"};
  void* f[5];
  for (int i = 0; i < 5; ++i) {
    f[i] = dlsym(lib, syms[i]);
    if (!f[i]) {
      dlclose(lib);
      PyErr_Format(PyExc_OSError, "dlfuse._ext: %s has no %s: not libdlfuse", path, syms[i]);
      return NULL;
    }
  }
  if (S.lib) dlclose(S.lib);
  S.lib = lib;
  memcpy(&S.mar, &f[0], sizeof f[0]);
  memcpy(&S.mar_bwd, &f[1], sizeof f[1]);
  memcpy(&S.amc, &f[2], sizeof f[2]);
  memcpy(&S.amc_bwd, &f[3], sizeof f[3]);
  memcpy(&S.last_error, &f[4], sizeof f[4]);
  /* ABI 1.1: optional, so that a 1.0 libdlfuse still serves the 1.0 ops */
  void* g[5] = {dlsym(lib, "dlfuse_matmul_add_activation"), dlsym(lib, "dlfuse_matmul_add_activation_backward"),
                dlsym(lib, "dlfuse_matmul_add_residual"), dlsym(lib, "dlfuse_matmul_add_residual_backward"),
                dlsym(lib, "dlfuse_add_mul_activation_backward_from_out")};
  memcpy(&S.maa, &g[0], sizeof g[0]);
  memcpy(&S.maa_bwd, &g[1], sizeof g[1]);
  memcpy(&S.mres, &g[2], sizeof g[2]);
  memcpy(&S.mres_bwd, &g[3], sizeof g[3]);
  memcpy(&S.amc_bwd_out, &g[4], sizeof g[4]);
  /* ABI 1.2: optional likewise */
  void* h12[4] = {dlsym(lib, "dlfuse_op_get"), dlsym(lib, "dlfuse_op_schema"), dlsym(lib, "dlfuse_op_infer_outputs"),
                  dlsym(lib, "dlfuse_op_call")};
  memcpy(&S.op_get, &h12[0], sizeof h12[0]);
  memcpy(&S.op_schema, &h12[1], sizeof h12[1]);
  memcpy(&S.op_infer, &h12[2], sizeof h12[2]);
  memcpy(&S.op_call, &h12[3], sizeof h12[3]);
  for (int i = 0; i < 16; ++i) {
    Py_CLEAR(S.errors[i]);
    if (i < PyTuple_GET_SIZE(errors)) S.errors[i] = Py_NewRef(PyTuple_GET_ITEM(errors, i));
  }
  Py_XSETREF(S.tensor_type, Py_NewRef(tensor_type));
  Py_XSETREF(S.alloc_fallback, Py_NewRef(fallback));
  Py_XSETREF(S.default_registry, Py_NewRef(defreg));
  Py_XSETREF(S.activations, Py_NewRef(acts));
  Py_XSETREF(S.activation_names, PyDict_Keys(acts));
  if (!S.activation_names || PyList_Sort(S.activation_names) < 0) return NULL;
  Py_CLEAR(S.default_registry_obj);
  Py_RETURN_NONE;
}

/* A DLTensor's address inside a capsule, for tests and tools (no ownership taken). */
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

static PyObject* py_current_stream(PyObject* self, PyObject* obj) {
  (void)self;
  View v;
  if (view_import(obj, "tensor", NULL, &v) < 0) return NULL;
  void* s = NULL;
  int rc = pick_stream(&v, 0, &s);
  view_release(&v);
  if (rc < 0) return NULL;
  return PyLong_FromVoidPtr(s);
}

/* What frees dlfuse.Tensor's DLPack exports: the deleter of the exported
   DLManagedTensor(Versioned) and the destructor of its capsule, both C because a consumer
   may call them with its own exception pending (np.from_dlpack dropping a capsule it
   refuses), which a ctypes callback cannot run under (the consumer's error became a
   SystemError). `export_release` is dlfuse._core._release, set by export_deleter(). */
static PyObject* export_release;

/* export_release(addr), the GIL held, keeping the caller's pending exception. */
static void release_export(void* addr) {
#if PY_VERSION_HEX >= 0x030C0000
  PyObject* pending = PyErr_GetRaisedException();
#else
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
#endif
  PyObject* r = export_release ? PyObject_CallFunction(export_release, "K", (unsigned long long)(uintptr_t)addr) : NULL;
  if (!r && PyErr_Occurred()) PyErr_WriteUnraisable(export_release);
  Py_XDECREF(r);
#if PY_VERSION_HEX >= 0x030C0000
  PyErr_SetRaisedException(pending);
#else
  PyErr_Restore(type, value, tb);
#endif
}

/* A consumer calls it when done, maybe from a thread of its own (hence the GIL). */
static void export_deleter(void* managed) {
  if (!Py_IsInitialized()) return; /* a consumer freeing after interpreter exit: nothing to release */
  PyGILState_STATE g = PyGILState_Ensure();
  release_export(managed);
  PyGILState_Release(g);
}

static PyObject* py_export_deleter(PyObject* self, PyObject* release) {
  (void)self;
  Py_INCREF(release);
  Py_XSETREF(export_release, release);
  return PyLong_FromVoidPtr((void*)(uintptr_t)&export_deleter);
}

/* A capsule still named dltensor* when it dies was taken by no consumer (one that takes it
   renames it used_* and calls the deleter). */
static void export_capsule_destructor(PyObject* cap) {
  const char* name = PyCapsule_IsValid(cap, "dltensor_versioned") ? "dltensor_versioned"
                     : PyCapsule_IsValid(cap, "dltensor")         ? "dltensor"
                                                                  : NULL;
  if (name) release_export(PyCapsule_GetPointer(cap, name));
}

static PyObject* py_export_capsule(PyObject* self, PyObject* args) {
  (void)self;
  unsigned long long addr;
  int versioned;
  if (!PyArg_ParseTuple(args, "Kp:export_capsule", &addr, &versioned)) return NULL;
  return PyCapsule_New((void*)(uintptr_t)addr, versioned ? "dltensor_versioned" : "dltensor", export_capsule_destructor);
}

static PyMethodDef methods[] = {
    {"load", py_load, METH_VARARGS, "load(path, errors, Tensor, alloc_fallback, registry, activations)"},
    {"call", (PyCFunction)(void (*)(void))py_call, METH_FASTCALL,
     "call(op, inputs, attrs, out, stream, registry)\n--\n\n"
     "Any op by name (ABI 1.2), by its schema: dlfuse.call's native half."},
    {"matmul_add_relu", (PyCFunction)(void (*)(void))py_matmul_add_relu, METH_FASTCALL | METH_KEYWORDS,
     "matmul_add_relu(a, b, bias, out=None, stream=None, *, allow_tf32=False, registry=None)\n--\n\n"
     "out = relu(a @ b + bias). a [..., M, K], b [..., K, N], bias broadcastable to out.\n"
     "Returns `out` (allocated like `a` when not given)."},
    {"matmul_add_relu_backward", (PyCFunction)(void (*)(void))py_matmul_add_relu_backward,
     METH_FASTCALL | METH_KEYWORDS,
     "matmul_add_relu_backward(grad_out, a, b, out, *, bias_shape=None, needs=(True, True, True), "
     "grad_a=None, grad_b=None, grad_bias=None, stream=None, allow_tf32=False, registry=None)\n--\n\n"
     "(grad_a, grad_b, grad_bias) of matmul_add_relu from grad_out and the saved a, b, out.\n"
     "`needs` says which to compute (others are None); grad_bias has `bias_shape`\n"
     "(default: grad_bias's shape if given, else [N]). Given grad_* tensors are written."},
    {"add_mul_activation", (PyCFunction)(void (*)(void))py_add_mul_activation, METH_FASTCALL | METH_KEYWORDS,
     "add_mul_activation(x, y, bias, multiplier=1.0, activation='relu', out=None, stream=None, *, "
     "registry=None)\n--\n\n"
     "out = act(x + bias + multiplier * y), NumPy broadcasting; `out` may be exactly `x`.\n"
     "Returns `out` (allocated like `x` when not given)."},
    {"add_mul_activation_backward", (PyCFunction)(void (*)(void))py_add_mul_activation_backward,
     METH_FASTCALL | METH_KEYWORDS,
     "add_mul_activation_backward(grad_out, x=None, y=None, bias=None, multiplier=1.0, activation='relu', *, "
     "needs=(True, True, True), grad_x=None, grad_y=None, grad_bias=None, stream=None, registry=None, out=None, "
     "x_shape=None, y_shape=None, bias_shape=None)\n--\n\n"
     "(grad_x, grad_y, grad_bias) of add_mul_activation from grad_out and the forward's\n"
     "inputs (the pre-activation is recomputed), or (ABI 1.1, identity/relu/sigmoid/tanh) from\n"
     "its out, with x, y, bias None and the gradients' shapes in x_shape, y_shape, bias_shape."},
    {"matmul_add_activation", (PyCFunction)(void (*)(void))py_matmul_add_activation, METH_FASTCALL | METH_KEYWORDS,
     "matmul_add_activation(a, b, bias, activation, out=None, pre=None, stream=None, allow_tf32=False, "
     "registry=None)\n--\n\nact(a @ b + bias); returns out, or (out, pre) when pre is True or a tensor (ABI 1.1)."},
    {"matmul_add_activation_backward", (PyCFunction)(void (*)(void))py_matmul_add_activation_backward,
     METH_FASTCALL | METH_KEYWORDS,
     "matmul_add_activation_backward(grad_out, a, b, activation, out=None, pre=None, bias_shape=None, needs=None, "
     "grad_a=None, grad_b=None, grad_bias=None, stream=None, allow_tf32=False, registry=None)\n--\n\n"
     "(grad_a, grad_b, grad_bias) from exactly one of out and pre (ABI 1.1)."},
    {"matmul_add_residual", (PyCFunction)(void (*)(void))py_matmul_add_residual, METH_FASTCALL | METH_KEYWORDS,
     "matmul_add_residual(a, b, bias, residual, out=None, stream=None, allow_tf32=False, registry=None)\n--\n\n"
     "a @ b + bias + residual; out may be residual itself (ABI 1.1)."},
    {"matmul_add_residual_backward", (PyCFunction)(void (*)(void))py_matmul_add_residual_backward,
     METH_FASTCALL | METH_KEYWORDS,
     "matmul_add_residual_backward(grad_out, a, b, bias_shape=None, residual_shape=None, needs=None, grad_a=None, "
     "grad_b=None, grad_bias=None, grad_residual=None, stream=None, allow_tf32=False, registry=None)\n--\n\n"
     "(grad_a, grad_b, grad_bias, grad_residual) (ABI 1.1)."},
    {"set_loader", py_set_loader, METH_O, "The callable the first op call runs to load libdlfuse."},
    {"exchange_api", py_exchange_api, METH_O,
     "The (major, minor) DLPack exchange API a type (or an object's type) offers, or None."},
    {"export_deleter", py_export_deleter, METH_O,
     "export_deleter(release): the address of a C DLPack deleter that calls release(address of the managed tensor)."},
    {"export_capsule", py_export_capsule, METH_VARARGS,
     "export_capsule(address, versioned): a DLPack capsule of the managed tensor at address; "
     "the export_deleter's release(address) runs when it dies unconsumed."},
    {"current_stream", py_current_stream, METH_O,
     "The stream a call on this tensor runs on when no stream= is given (0: the plugin's default)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "dlfuse._ext",
                                    "dlfuse's compiled hot path over libdlfuse's C ABI", -1, methods,
                                    NULL, NULL, NULL, NULL};

static PyObject* intern(const char* s) { return PyUnicode_InternFromString(s); }

PyMODINIT_FUNC PyInit__ext(void) {
  PyObject* m = PyModule_Create(&module);
  if (!m) return NULL;
#define I(field, str) \
  if (!(S.field = intern(str))) goto fail;
  I(s_dlpack, "__dlpack__");
  I(s_dlpack_device, "__dlpack_device__");
  I(s_dlpack_c_api, "__dlpack_c_exchange_api__");
  I(s_tensor_addr, "_tensor_addr");
  I(s_h, "_h");
  I(s_dtype, "dtype");
  I(s_stream, "_stream");
  I(s_written, "_written");
  I(s_max_version, "max_version");
  I(s_requires_grad, "requires_grad");
  I(s_detach, "detach");
  I(s_cuda_stream, "cuda_stream");
  I(s_ptr, "ptr");
  I(s_handle, "handle");
  I(s_module, "__module__");
#undef I
  S.kw_max_version = PyTuple_Pack(1, S.s_max_version);
  S.kw_stream = PyTuple_Pack(1, intern("stream"));
  S.kw_stream_max = PyTuple_Pack(2, intern("stream"), S.s_max_version);
  S.kw_dtype = PyTuple_Pack(1, S.s_dtype);
  S.version_1_0 = Py_BuildValue("(ii)", 1, 0);
  if (!S.kw_max_version || !S.kw_stream || !S.kw_stream_max || !S.kw_dtype || !S.version_1_0) goto fail;
  /* NumPy is a dependency of the package; its ndarray type gets the no-call device path. */
  PyObject* np = PyImport_ImportModule("numpy");
  if (np) {
    S.numpy_empty = PyObject_GetAttrString(np, "empty");
    S.ndarray = (PyTypeObject*)PyObject_GetAttrString(np, "ndarray");
    Py_DECREF(np);
  }
  PyErr_Clear();
  return m;
fail:
  Py_DECREF(m);
  return NULL;
}

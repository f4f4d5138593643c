/* dlfuse._ext: the Python package's one native layer, on the CPython API.
 *
 * Ops: one callable type, OpFunction, for every op; its parameters come from the op's schema
 * (dlfuse_registry_op_schema), so no op is named here. Per call: parse the arguments
 * (vectorcall, no tuple/dict), take each tensor's DLTensor (the type's DLPack exchange API
 * where it has one, else __dlpack__), allocate missing outputs (the exchange API's allocator,
 * numpy.empty, or a Python fallback) with the shapes the schema's rules give, call
 * dlfuse_op_call, raise the package's exception with the C message on failure.
 *
 * The rest of the package's use of libdlfuse goes through here too: the registry's admin
 * calls, device memory, dlfuse.Tensor's DLPack export.
 *
 * libdlfuse is dlopen'ed at load() from the path the Python side resolved
 * ($DLFUSE_LIBRARY, the wheel's own copy, the prefix, the loader's path). A call through a
 * dlsym'ed pointer costs what a PLT call does.
 *
 * Everything here runs with the GIL held (released around the C calls that may take long);
 * the module state is process-wide. */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE /* dladdr */
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include <dlpack/dlpack.h>
#include <dlfuse/dlfuse.h>
#include <dlfuse/plugin.h> /* DLFUSE_KERNEL_TAKES_V1_1_INPUTS */

#if DLPACK_MAJOR_VERSION > 1 || (DLPACK_MAJOR_VERSION == 1 && DLPACK_MINOR_VERSION >= 3)
#define DLFUSE_HAVE_EXCHANGE_API 1
#else
#define DLFUSE_HAVE_EXCHANGE_API 0
typedef struct DLPackExchangeAPI DLPackExchangeAPI;
#endif

#define MAX_NDIM DLFUSE_MAX_NDIM /* shapes are built on the stack; the registry takes no deeper ones */

/* ---- module state -------------------------------------------------------------------- */

static struct {
  void* lib;
  __typeof__(&dlfuse_last_error) last_error;
  __typeof__(&dlfuse_op_get) op_get;
  __typeof__(&dlfuse_op_call) op_call;
  /* ABI 1.2 (op schemas); NULL with an older libdlfuse, whose ops then say so */
  __typeof__(&dlfuse_op_schema) op_schema;
  __typeof__(&dlfuse_op_infer_outputs) op_infer;
  __typeof__(&dlfuse_registry_op_count) op_count;
  __typeof__(&dlfuse_registry_op_schema) reg_op_schema;
  __typeof__(&dlfuse_op_backward_plan) op_backward_plan;
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
      *s_ptr, *s_handle, *s_module, *s_ops, *s_registry;
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
  if (S.op_call) return 0;
  if (S.loader) {
    PyObject* r = PyObject_CallNoArgs(S.loader);
    if (!r) return -1;
    Py_DECREF(r);
    if (S.op_call) return 0;
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

/* ---- shapes and allocation ------------------------------------------------------------------ */

typedef struct {
  int ndim;
  int64_t d[MAX_NDIM];
} Shape;

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

/* ---- ops from their schemas ------------------------------------------------------------------
 *
 * One callable type, OpFunc, serves every op: its parameters are derived from the op's
 * schema (dlfuse_registry_op_schema) the first time it is called, so an op added to
 * dlfuse/ops.def, or declared by a plugin, is callable with no change here:
 *   - each input by its schema name; each output by its name (None: allocated where wanted,
 *     True: allocated, False: not written, a tensor: written);
 *   - each attribute by its name in lower case (`activation` also takes the activation's
 *     name; an INT64 attribute of range [0, 1] takes any truth value);
 *   - `needs` (one truth value per output) when every output is optional (a gradient op):
 *     which outputs to allocate and compute;
 *   - `<x>_shape` for each REDUCIBLE output `grad_<x>` (else `<output>_shape`): the shape to
 *     allocate it with. Default: the inferred one; where the input <x> is not part of the
 *     call and <x> is `bias`, the inferred shape's last dim (dlfuse's ops take a row bias);
 *   - `stream` and `registry`.
 * Which of them are positional, and how many are required, is the `positional` spec given
 * at creation; without one, the inputs (up to the first optional one required), then the
 * attributes. The result is the one required output alone when that is all that was
 * written, else a tuple of every output (None where not written). */

enum { P_IN, P_OUT, P_ATTR, P_NEEDS, P_SHAPE, P_STREAM, P_REGISTRY };
#define MAX_PARAMS (3 * DLFUSE_MAX_ARGS + DLFUSE_MAX_ATTRS + 3)

typedef struct {
  PyObject* name; /* interned */
  int kind;
  int index; /* input, output or attribute index; P_SHAPE: the output's */
} Param;

typedef struct {
  int ready;
  int num_inputs, num_outputs, num_attrs;
  dlfuse_arg_schema_t in[DLFUSE_MAX_ARGS], out[DLFUSE_MAX_ARGS];
  dlfuse_attr_schema_t attr[DLFUSE_MAX_ATTRS];
  PyObject* names[2 * DLFUSE_MAX_ARGS + DLFUSE_MAX_ATTRS]; /* owned: the C names point into them */
  int nnames;
  int has_required_out;
  int since_minor;
  int shape_base_in[DLFUSE_MAX_ARGS]; /* P_SHAPE: the input the gradient belongs to, or -1 */
  int is_bias[DLFUSE_MAX_ARGS];       /* that input is named bias */
  Param p[MAX_PARAMS];
  int np, npos, nreq;
  int needs_param; /* index of P_NEEDS in p, or -1 */
  unsigned char attr_kind[DLFUSE_MAX_ATTRS]; /* attr_kind() of each attribute */
  int relu_index;  /* the attribute that defaults to relu here (relu_default()), or -1 */
} Sig;

typedef struct {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* name;       /* the op's name */
  PyObject* positional; /* a tuple of parameter names, or None */
  Py_ssize_t nreq;      /* how many of them are required; -1: derived */
  PyObject* doc;
  Sig sig;
  void* op_reg; /* the default registry handle op was looked up in */
  dlfuse_op_t op;
  /* The last Registry object passed, weakly (a dead one cannot be mistaken for a new one at
   * its address), with its handle then and the op's handle in it. */
  PyObject* last_reg_ref;
  void* last_reg_h;
  dlfuse_op_t last_reg_op;
} OpFunc;

/* How the binding takes an attribute's value, from its schema alone: its declared type, its
 * name and its range. Keys are the op's own (docs/abi.md): a plugin may declare any type
 * under a number a core op uses for another attribute, so no key is compared here. */
enum { K_FLOAT, K_INT, K_FLAG, K_ACT };

static int is_activation_name(const char* n) {
  return n && (strcasecmp(n, "activation") == 0 || strcasecmp(n, "output_activation") == 0);
}

static int attr_kind(const dlfuse_attr_schema_t* as) {
  if (as->default_value.type == DLFUSE_ATTR_FLOAT64) return K_FLOAT;
  if (is_activation_name(as->name)) return K_ACT; /* a dlfuse_activation_t: also by its name */
  if (as->min_value == 0 && as->max_value == 1) return K_FLAG;
  return K_INT;
}

static const char* const kind_names[] = {"float", "int", "flag", "activation"};

/* The binding's default `activation` of relu (docs/python.md) belongs to the core ops' frozen
 * signatures: their schemas make ACTIVATION required. A plugin's op gets its schema's own
 * default, or none. */
static int relu_default(const dlfuse_op_schema_t* sc, const dlfuse_attr_schema_t* as) {
  return sc->plugin < 0 && attr_kind(as) == K_ACT && as->name && strcasecmp(as->name, "activation") == 0 &&
         (as->flags & DLFUSE_ATTR_REQUIRED);
}

static void sig_clear(Sig* g) {
  for (int i = 0; i < g->nnames; ++i) Py_CLEAR(g->names[i]);
  for (int i = 0; i < g->np; ++i) Py_CLEAR(g->p[i].name);
  g->nnames = g->np = 0;
  g->ready = 0;
}

static PyObject* own_name(Sig* g, const char* c, const char** cstr) {
  PyObject* n = PyUnicode_InternFromString(c ? c : "");
  if (!n) return NULL;
  g->names[g->nnames++] = n;
  *cstr = PyUnicode_AsUTF8(n);
  return n;
}

static int add_param(Sig* g, PyObject* name, int kind, int index) {
  for (int i = 0; i < g->np; ++i)
    if (PyUnicode_Compare(g->p[i].name, name) == 0) return 0; /* a clash keeps the first (schema order) */
  if (g->np == MAX_PARAMS) return 0;
  g->p[g->np].name = Py_NewRef(name);
  g->p[g->np].kind = kind;
  g->p[g->np].index = index;
  ++g->np;
  return 0;
}

static PyObject* lower_name(const char* c) {
  char buf[64];
  size_t n = strlen(c);
  if (n >= sizeof buf) n = sizeof buf - 1;
  for (size_t i = 0; i < n; ++i) buf[i] = (char)((c[i] >= 'A' && c[i] <= 'Z') ? c[i] - 'A' + 'a' : c[i]);
  buf[n] = 0;
  return PyUnicode_InternFromString(buf);
}

/* The parameters of an op from its schema and the positional spec. */
static int sig_build(Sig* g, const dlfuse_op_schema_t* sc, PyObject* positional, Py_ssize_t nreq) {
  sig_clear(g);
  if (sc->num_inputs < 0 || sc->num_inputs > DLFUSE_MAX_ARGS || sc->num_outputs < 1 ||
      sc->num_outputs > DLFUSE_MAX_ARGS || sc->num_attrs < 0 || sc->num_attrs > DLFUSE_MAX_ATTRS) {
    PyErr_Format(PyExc_RuntimeError, "dlfuse: op %s: a schema with %d inputs, %d outputs, %d attributes",
                 sc->name, sc->num_inputs, sc->num_outputs, sc->num_attrs);
    return -1;
  }
  g->num_inputs = sc->num_inputs;
  g->num_outputs = sc->num_outputs;
  g->num_attrs = sc->num_attrs;
  g->has_required_out = 0;
  g->since_minor = (int)sc->since_minor;
  g->needs_param = -1;
  PyObject* tmp[MAX_PARAMS];
  int ntmp = 0;
  for (int i = 0; i < sc->num_inputs; ++i) {
    g->in[i] = sc->inputs[i];
    PyObject* n = own_name(g, sc->inputs[i].name, &g->in[i].name);
    if (!n) goto fail;
    if (add_param(g, n, P_IN, i) < 0) goto fail;
  }
  for (int i = 0; i < sc->num_outputs; ++i) {
    g->out[i] = sc->outputs[i];
    PyObject* n = own_name(g, sc->outputs[i].name, &g->out[i].name);
    if (!n) goto fail;
    if (!(g->out[i].flags & DLFUSE_ARG_OPTIONAL)) g->has_required_out = 1;
    if (add_param(g, n, P_OUT, i) < 0) goto fail;
  }
  for (int i = 0; i < sc->num_attrs; ++i) {
    g->attr[i] = sc->attrs[i];
    const char* ignored;
    if (!own_name(g, sc->attrs[i].name, &ignored)) goto fail;
    g->attr[i].name = ignored;
    PyObject* n = lower_name(sc->attrs[i].name);
    if (!n) goto fail;
    tmp[ntmp++] = n;
    if (add_param(g, n, P_ATTR, i) < 0) goto fail;
  }
  if (!g->has_required_out) {
    PyObject* n = PyUnicode_InternFromString("needs");
    if (!n) goto fail;
    tmp[ntmp++] = n;
    g->needs_param = g->np;
    if (add_param(g, n, P_NEEDS, 0) < 0) goto fail;
  }
  for (int i = 0; i < sc->num_outputs; ++i) {
    g->shape_base_in[i] = -1;
    g->is_bias[i] = 0;
    if (!(g->out[i].flags & DLFUSE_ARG_REDUCIBLE)) continue;
    const char* on = g->out[i].name;
    const char* base = strncmp(on, "grad_", 5) == 0 ? on + 5 : on;
    for (int j = 0; j < sc->num_inputs; ++j)
      if (strcmp(g->in[j].name, base) == 0) g->shape_base_in[i] = j;
    g->is_bias[i] = strcmp(base, "bias") == 0;
    PyObject* n = PyUnicode_FromFormat("%s_shape", base);
    if (!n) goto fail;
    PyUnicode_InternInPlace(&n);
    tmp[ntmp++] = n;
    if (add_param(g, n, P_SHAPE, i) < 0) goto fail;
  }
  {
    PyObject* n = PyUnicode_InternFromString("stream");
    if (!n) goto fail;
    tmp[ntmp++] = n;
    if (add_param(g, n, P_STREAM, 0) < 0) goto fail;
    n = PyUnicode_InternFromString("registry");
    if (!n) goto fail;
    tmp[ntmp++] = n;
    if (add_param(g, n, P_REGISTRY, 0) < 0) goto fail;
  }
  for (int i = 0; i < ntmp; ++i) Py_DECREF(tmp[i]);
  ntmp = 0;
  /* positional parameters first, in the spec's order */
  if (positional && positional != Py_None) {
    Py_ssize_t n = PyTuple_GET_SIZE(positional);
    for (Py_ssize_t k = 0; k < n; ++k) {
      PyObject* want = PyTuple_GET_ITEM(positional, k);
      int found = -1;
      for (int i = (int)k; i < g->np && found < 0; ++i)
        if (PyUnicode_Compare(g->p[i].name, want) == 0) found = i;
      if (found < 0) {
        PyErr_Format(PyExc_TypeError, "dlfuse: op %s has no parameter %R (its schema changed?)", sc->name, want);
        goto fail;
      }
      Param t = g->p[found];
      memmove(&g->p[k + 1], &g->p[k], sizeof(Param) * (size_t)(found - k));
      g->p[k] = t;
    }
    g->npos = (int)n;
    g->nreq = nreq < 0 ? 0 : (int)nreq;
  } else {
    int nin = 0;
    while (nin < sc->num_inputs && !(g->in[nin].flags & DLFUSE_ARG_OPTIONAL)) ++nin;
    g->npos = sc->num_inputs + sc->num_attrs;
    g->nreq = nin;
    /* inputs then attributes: move the attributes up behind the inputs */
    for (int k = 0; k < sc->num_attrs; ++k) {
      int found = -1;
      for (int i = sc->num_inputs + k; i < g->np && found < 0; ++i)
        if (g->p[i].kind == P_ATTR && g->p[i].index == k) found = i;
      if (found < 0) {
        g->npos = sc->num_inputs + k;
        break;
      }
      Param t = g->p[found];
      memmove(&g->p[sc->num_inputs + k + 1], &g->p[sc->num_inputs + k], sizeof(Param) * (size_t)(found - sc->num_inputs - k));
      g->p[sc->num_inputs + k] = t;
    }
  }
  for (int i = 0; i < g->np; ++i)
    if (g->p[i].kind == P_NEEDS) g->needs_param = i;
  g->relu_index = -1;
  for (int i = 0; i < g->num_attrs; ++i) {
    g->attr_kind[i] = (unsigned char)attr_kind(&g->attr[i]);
    if (relu_default(sc, &g->attr[i])) g->relu_index = i;
  }
  g->ready = 1;
  return 0;
fail:
  for (int i = 0; i < ntmp; ++i) Py_DECREF(tmp[i]);
  sig_clear(g);
  return -1;
}

/* The schema of `name` in registry h: looked up by name among the registry's schemas (an op
 * no plugin offers yet has one too, when it is a core op). */
static int find_schema(void* h, const char* name, dlfuse_op_schema_t* sc) {
  if (!S.op_count || !S.reg_op_schema) {
    PyErr_Format(PyExc_NotImplementedError,
                 "dlfuse: %s needs libdlfuse of ABI >= 1.2 (op schemas); the loaded library is older", name);
    return -1;
  }
  int32_t n = 0;
  int st = S.op_count((dlfuse_registry_t)h, &n);
  if (st) return raise_status(st, NULL);
  for (int32_t i = 0; i < n; ++i) {
    memset(sc, 0, sizeof *sc);
    sc->struct_size = sizeof *sc;
    if (S.reg_op_schema((dlfuse_registry_t)h, i, sc) == 0 && sc->name && strcmp(sc->name, name) == 0) return 0;
  }
  char msg[256];
  snprintf(msg, sizeof msg, "op '%s': no core op or loaded plugin's op has this name", name);
  return raise_status(DLFUSE_STATUS_NOT_FOUND, msg);
}

/* The handle and schema of op `name` (ABI 1.2), or -1 with the exception set: NOT_FOUND for
 * a name with no schema, UNSUPPORTED where no plugin offers the op (as OpFunction). */
static int op_with_schema(void* h, const char* name, dlfuse_op_t* op, dlfuse_op_schema_t* sc) {
  if (!S.op_schema) {
    PyErr_Format(PyExc_NotImplementedError,
                 "dlfuse: %s needs libdlfuse of ABI >= 1.2 (op schemas); the loaded library is older", name);
    return -1;
  }
  int st = S.op_get((dlfuse_registry_t)h, name, op);
  if (st == DLFUSE_STATUS_NOT_FOUND) {  /* the registry's list tells the two apart */
    char msg[512];
    const char* why = S.last_error ? S.last_error() : NULL;
    snprintf(msg, sizeof msg, "%s", why ? why : "");
    if (find_schema(h, name, sc) < 0) return -1;
    return raise_status(DLFUSE_STATUS_UNSUPPORTED, msg);
  }
  if (st) return raise_status(st, NULL);
  memset(sc, 0, sizeof *sc);
  sc->struct_size = sizeof *sc;
  return (st = S.op_schema(*op, sc)) != 0 ? raise_status(st, NULL) : 0;
}

/* A bad attribute value: `kind` of exception, naming the attribute (its parameter name, lower
 * case), what it must be and what it got. Chains the conversion's own error, if any. */
static int bad_attr(PyObject* kind, const char* fn, const char* name, const char* expected, PyObject* value) {
  char low[64];
  size_t n = strlen(name);
  if (n >= sizeof low) n = sizeof low - 1;
  for (size_t i = 0; i < n; ++i) low[i] = (char)((name[i] >= 'A' && name[i] <= 'Z') ? name[i] - 'A' + 'a' : name[i]);
  low[n] = 0;
  PyObject *et = NULL, *ev = NULL, *tb = NULL;
  PyErr_Fetch(&et, &ev, &tb);
  PyErr_NormalizeException(&et, &ev, &tb);
  PyObject* r = PyObject_Repr(value);
  if (!r) { /* a value whose repr fails is named by its type alone */
    PyErr_Clear();
    r = PyUnicode_FromString("(no repr)");
  }
  if (r) {
    PyErr_Format(kind, "dlfuse: %s(): %s must be %s, got %s %.80U", fn, low, expected, Py_TYPE(value)->tp_name, r);
    Py_DECREF(r);
  }
  if (ev && PyErr_Occurred()) {
    PyObject *nt, *nv, *ntb;
    PyErr_Fetch(&nt, &nv, &ntb);
    PyErr_NormalizeException(&nt, &nv, &ntb);
    PyException_SetCause(nv, Py_NewRef(ev));
    PyException_SetContext(nv, ev);
    ev = NULL;
    PyErr_Restore(nt, nv, ntb);
  }
  Py_XDECREF(et);
  Py_XDECREF(ev);
  Py_XDECREF(tb);
  return -1;
}

#define EXPECT_FLOAT "a real number (FLOAT64 attribute)"
#define EXPECT_INT "an integer (INT64 attribute)"
#define EXPECT_FLAG "a truth value (INT64 attribute of range [0, 1])"

/* A dlfuse_activation_t: its name, or the integer (the registry checks the range). */
static int parse_activation(const char* fn, const char* name, PyObject* o, int64_t* act) {
  if (PyUnicode_Check(o)) {
    PyObject* v = PyDict_GetItemWithError(S.activations, o);
    if (!v) {
      if (PyErr_Occurred()) return -1;
      PyObject* exp = PyUnicode_FromFormat("one of %S or a dlfuse_activation_t integer", S.activation_names);
      if (!exp) return -1;
      const char* e = PyUnicode_AsUTF8(exp);
      const int r = e ? bad_attr(PyExc_ValueError, fn, name, e, o) : -1;
      Py_DECREF(exp);
      return r;
    }
    *act = PyLong_AsLongLong(v);
    return 0;
  }
  if (PyFloat_Check(o) || PyBytes_Check(o) || PyByteArray_Check(o)) {
    PyObject* exp = PyUnicode_FromFormat("one of %S or a dlfuse_activation_t integer", S.activation_names);
    if (!exp) return -1;
    const char* e = PyUnicode_AsUTF8(exp);
    const int r = e ? bad_attr(PyExc_TypeError, fn, name, e, o) : -1;
    Py_DECREF(exp);
    return r;
  }
  int overflow = 0;
  *act = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (*act == -1 && PyErr_Occurred())
    return bad_attr(PyExc_TypeError, fn, name, "an activation name or a dlfuse_activation_t integer", o);
  if (overflow) return bad_attr(PyExc_ValueError, fn, name, "a dlfuse_activation_t integer", o);
  return 0;
}

/* Python attribute value -> dlfuse_attr_t by the schema: its type, and `kind` (attr_kind). A
 * value of the wrong type is a TypeError, one out of int64's range a ValueError, each naming
 * the attribute, what it must be and what it got; nothing is truncated (an INT64 refuses
 * 2.5). */
static int attr_value(const char* fn, const dlfuse_attr_schema_t* as, int kind, PyObject* value, dlfuse_attr_t* a) {
  *a = as->default_value;
  switch (kind) {
    case K_FLOAT:
      if (PyFloat_Check(value)) {
        a->value.f64 = PyFloat_AS_DOUBLE(value);
        return 0;
      }
      if (PyUnicode_Check(value) || PyBytes_Check(value) || PyByteArray_Check(value))
        return bad_attr(PyExc_TypeError, fn, as->name, EXPECT_FLOAT, value);
      a->value.f64 = PyFloat_AsDouble(value); /* int, NumPy scalars, 0-d arrays: __float__ / __index__ */
      if (a->value.f64 == -1.0 && PyErr_Occurred())
        return bad_attr(PyErr_ExceptionMatches(PyExc_OverflowError) ? PyExc_ValueError : PyExc_TypeError, fn, as->name,
                        EXPECT_FLOAT, value);
      return 0;
    case K_ACT:
      return parse_activation(fn, as->name, value, &a->value.i64);
    case K_FLAG: { /* any truth value */
      const int t = PyObject_IsTrue(value);
      if (t < 0) return bad_attr(PyExc_TypeError, fn, as->name, EXPECT_FLAG, value);
      a->value.i64 = t;
      return 0;
    }
    default: {
      if (PyFloat_Check(value) || PyUnicode_Check(value) || PyBytes_Check(value) || PyByteArray_Check(value))
        return bad_attr(PyExc_TypeError, fn, as->name, EXPECT_INT, value);
      int overflow = 0;
      a->value.i64 = PyLong_AsLongLongAndOverflow(value, &overflow); /* ints, NumPy integers: __index__ */
      if (a->value.i64 == -1 && PyErr_Occurred()) return bad_attr(PyExc_TypeError, fn, as->name, EXPECT_INT, value);
      if (overflow)
        return bad_attr(PyExc_ValueError, fn, as->name, "an integer in int64's range (INT64 attribute)", value);
      return 0;
    }
  }
}

/* NumPy broadcasting of n shapes; 0 when they do not broadcast. */
static int broadcast_shapes(Shape* out, int n, const int64_t* const* dims, const int* nds) {
  int nd = 0;
  for (int k = 0; k < n; ++k) {
    if (nds[k] < 0 || nds[k] > DLFUSE_MAX_NDIM) return 0;
    if (nds[k] > nd) nd = nds[k];
  }
  out->ndim = nd;
  for (int i = 0; i < nd; ++i) {
    int64_t d = 1;
    for (int k = 0; k < n; ++k) {
      const int j = i - (nd - nds[k]);
      if (j < 0) continue;
      const int64_t v = dims[k][j];
      if (v != 1) {
        if (d != 1 && d != v) return 0;
        d = v;
      }
    }
    out->d[i] = d;
  }
  return 1;
}

/* An output's shape by its schema's rule (dlfuse/ops.h: MATMUL, BROADCAST, LIKE), as
 * dlfuse_op_infer_outputs gives it, for the calls that fit the rule plainly; 0 otherwise
 * (a callback rule, shapes the rule refuses): the caller then asks the registry, which
 * also words the refusal. Here because a call allocating its outputs pays this on every
 * call, and the rule costs a few dozen instructions against the registry's ~1700. */
static int rule_shape(const dlfuse_arg_schema_t* o, const DLTensor* const* in, int nin, Shape* sh) {
  const DLTensor* ts[3];
  int n = 0;
  for (int i = 0; i < nin && i < 32; ++i) {
    if (!((o->shape_inputs >> i) & 1u) || !in[i]) continue;
    if (n == 3) return 0;
    ts[n++] = in[i];
  }
  if (n == 0) return 0;
  for (int k = 0; k < n; ++k)
    if (ts[k]->ndim < 0 || ts[k]->ndim > DLFUSE_MAX_NDIM || (ts[k]->ndim && !ts[k]->shape)) return 0;
  switch (o->shape_rule) {
    case DLFUSE_SHAPE_LIKE:
      sh->ndim = ts[0]->ndim;
      for (int i = 0; i < sh->ndim; ++i) sh->d[i] = ts[0]->shape[i];
      return 1;
    case DLFUSE_SHAPE_BROADCAST: {
      const int64_t* dims[3];
      int nds[3];
      for (int k = 0; k < n; ++k) dims[k] = ts[k]->shape, nds[k] = ts[k]->ndim;
      return broadcast_shapes(sh, n, dims, nds);
    }
    case DLFUSE_SHAPE_MATMUL: {
      const DLTensor *a = ts[0], *b = ts[1];
      if (n != 2 || a->ndim < 2 || b->ndim < 2 || a->shape[a->ndim - 1] != b->shape[b->ndim - 2]) return 0;
      const int64_t* dims[2] = {a->shape, b->shape};
      int nds[2] = {a->ndim - 2, b->ndim - 2};
      if (!broadcast_shapes(sh, 2, dims, nds) || sh->ndim + 2 > DLFUSE_MAX_NDIM) return 0;
      sh->d[sh->ndim++] = a->shape[a->ndim - 2];
      sh->d[sh->ndim++] = b->shape[b->ndim - 1];
      return 1;
    }
    default:
      return 0;
  }
}

/* A call's arguments, by kind, after parsing. */
typedef struct {
  PyObject* in[DLFUSE_MAX_ARGS];
  PyObject* out[DLFUSE_MAX_ARGS];   /* NULL/None: not given; Py_True/Py_False; a tensor */
  PyObject* shape[DLFUSE_MAX_ARGS]; /* P_SHAPE values */
  dlfuse_attr_t attrs[DLFUSE_MAX_ATTRS];
  int nattrs;
  int needs[DLFUSE_MAX_ARGS];
  int all_outputs; /* dlfuse.call: every output allocated, the result always the outputs */
  PyObject* stream;
  PyObject* registry;
} Args;

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

/* Runs op (looked up in h) with the parsed arguments; returns the result. */
static PyObject* run(const char* fn, const Sig* g, dlfuse_op_t op, void* h, Args* A) {
  (void)h;
  void* s;
  int given;
  if (parse_stream(A->stream, &s, &given) < 0) return NULL;
  View v[2 * DLFUSE_MAX_ARGS];
  const int nin = g->num_inputs, nout = g->num_outputs;
  memset(v, 0, sizeof(View) * (size_t)(nin + nout)); /* only those in use: a call's cost */
  const DLTensor* in[DLFUSE_MAX_ARGS];
  DLTensor* outs[DLFUSE_MAX_ARGS];
  PyObject* res[DLFUSE_MAX_ARGS];
  int want[DLFUSE_MAX_ARGS];
  int first = -1, need_alloc = 0, st;
  for (int i = 0; i < nout; ++i) res[i] = NULL;
  /* Inputs an ABI minor appended to an op are another form of its call (the backward from
   * `out`): without any of them, the optional inputs it had from the start are required. */
  int appended = 0, appended_given = 0;
  for (int i = 0; i < nin; ++i)
    if ((int)g->in[i].since_minor > g->since_minor) {
      appended = 1;
      appended_given |= !is_none(A->in[i]);
    }
  const int first_form_required = appended && !appended_given;
  for (int i = 0; i < nin; ++i) {
    in[i] = NULL;
    PyObject* o = A->in[i];
    if (is_none(o) && ((g->in[i].flags & DLFUSE_ARG_OPTIONAL) || !o)) {
      if (!(g->in[i].flags & DLFUSE_ARG_OPTIONAL) || (first_form_required && (int)g->in[i].since_minor <= g->since_minor)) {
        PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fn, g->in[i].name);
        goto fail;
      }
      continue;
    }
    if (view_import(o, g->in[i].name, s, &v[i]) < 0) goto fail;
    in[i] = v[i].t;
    if (first < 0) {
      first = i;
      if (pick_stream(&v[i], given, &s) < 0) goto fail;
    }
  }
  for (int i = 0; i < nout; ++i) {
    PyObject* o = A->out[i];
    const int optional = (g->out[i].flags & DLFUSE_ARG_OPTIONAL) != 0;
    if (!is_none(o) && o != Py_True && o != Py_False) {
      want[i] = 2; /* given */
      continue;
    }
    if (A->all_outputs || !optional) want[i] = o != Py_False || !optional;
    else if (!g->has_required_out) want[i] = A->needs[i] && o != Py_False;
    else want[i] = o == Py_True;
    need_alloc |= want[i] == 1;
  }
  if (need_alloc) {
    if (first < 0) {
      PyErr_Format(PyExc_TypeError, "%s(): no input to allocate outputs like; pass the outputs", fn);
      goto fail;
    }
    Shape rs[DLFUSE_MAX_ARGS];
    int by_rule = 1;
    for (int i = 0; i < nout && by_rule; ++i)
      if (want[i] == 1 && is_none(A->shape[i])) by_rule = rule_shape(&g->out[i], in, nin, &rs[i]);
    if (!by_rule) { /* the registry's inference, and its message where the shapes do not fit */
      int32_t ndims[DLFUSE_MAX_ARGS];
      int64_t shapes[DLFUSE_MAX_ARGS * DLFUSE_MAX_NDIM];
      DLDataType dtypes[DLFUSE_MAX_ARGS];
      st = S.op_infer(op, in, nin, A->attrs, A->nattrs, nout, ndims, shapes, dtypes);
      if (st) {
        raise_status(st, NULL);
        goto fail;
      }
      for (int i = 0; i < nout; ++i) {
        rs[i].ndim = ndims[i];
        memcpy(rs[i].d, shapes + (size_t)i * DLFUSE_MAX_NDIM, sizeof(int64_t) * (size_t)ndims[i]);
      }
    }
    for (int i = 0; i < nout; ++i) {
      if (want[i] != 1) continue;
      Shape sh;
      if (!is_none(A->shape[i])) {
        if (parse_shape(A->shape[i], "dlfuse: a *_shape argument must be a sequence of ints", &sh) < 0) goto fail;
      } else if (g->is_bias[i] && (g->shape_base_in[i] < 0 || !in[g->shape_base_in[i]]) && rs[i].ndim > 0) {
        sh.ndim = 1;
        sh.d[0] = rs[i].d[rs[i].ndim - 1];
      } else {
        sh = rs[i];
      }
      res[i] = alloc_like(A->in[first], &v[first], &sh, A->registry);
      if (!res[i]) goto fail;
    }
  }
  for (int i = 0; i < nout; ++i) {
    outs[i] = NULL;
    if (want[i] == 0) continue;
    if (want[i] == 2) {
      res[i] = Py_NewRef(A->out[i]);
      const int al = g->out[i].alias_input;
      if (al >= 0 && al < nin && A->in[al] == res[i] && in[al]) { /* in place: the input's view */
        if (v[al].read_only) {
          char msg[256];
          snprintf(msg, sizeof msg, "%s: expected a writable tensor, got one the producer exported as read-only",
                   g->out[i].name);
          raise_status(DLFUSE_STATUS_INVALID_ARGUMENT, msg);
          goto fail;
        }
        outs[i] = v[al].t;
        continue;
      }
    }
    if (view_import_out(res[i], g->out[i].name, s, &v[nin + i]) < 0) goto fail;
    outs[i] = v[nin + i].t;
  }
  Py_BEGIN_ALLOW_THREADS
  st = S.op_call(op, in, nin, outs, nout, A->attrs, A->nattrs, s);
  Py_END_ALLOW_THREADS
  if (st) {
    raise_status(st, NULL);
    goto fail;
  }
  release_all(v, nin + nout);
  int nwritten = 0, only = -1;
  for (int i = 0; i < nout; ++i) {
    if (!res[i]) continue;
    ++nwritten;
    only = i;
    if (mark_written(res[i], s) < 0) goto fail_res;
  }
  if ((A->all_outputs || g->has_required_out) && nout == 1) return res[0];
  if (!A->all_outputs && g->has_required_out && nwritten == 1 && !(g->out[only].flags & DLFUSE_ARG_OPTIONAL))
    return res[only];
  PyObject* t = PyTuple_New(nout);
  if (!t) goto fail_res;
  for (int i = 0; i < nout; ++i) PyTuple_SET_ITEM(t, i, res[i] ? res[i] : Py_NewRef(Py_None));
  return t;
fail:
  release_all(v, nin + nout);
fail_res:
  for (int i = 0; i < nout; ++i) Py_XDECREF(res[i]);
  return NULL;
}

/* The op's handle in registry h (cached for the default registry) and, the first time, its
 * parameters. */
static int opfunc_prepare(OpFunc* f, PyObject* regobj, void** h, dlfuse_op_t* op) {
  if (need_loaded() < 0 || parse_registry(regobj, h) < 0) return -1;
  const char* name = PyUnicode_AsUTF8(f->name);
  if (!name) return -1;
  if (!f->sig.ready) {
    dlfuse_op_schema_t sc;
    if (find_schema(*h, name, &sc) < 0) return -1;
    if (sig_build(&f->sig, &sc, f->positional, f->nreq) < 0) return -1;
  }
  const int is_default = is_none(regobj);
  if (is_default && f->op && f->op_reg == *h) {
    *op = f->op;
    return 0;
  }
  if (!is_default && *h && f->last_reg_ref && PyWeakref_GetObject(f->last_reg_ref) == regobj &&
      f->last_reg_h == *h) {
    *op = f->last_reg_op;
    return 0;
  }
  /* A Registry object keeps its own ops' handles (valid while its handle is: a closed one
   * has none, and the look-up below then fails). */
  PyObject* cache = NULL;
  if (!is_default && *h) {
    cache = PyObject_GetAttr(regobj, S.s_ops);
    if (!cache) PyErr_Clear();
    else if (!PyDict_Check(cache)) Py_CLEAR(cache);
    PyObject* hit = cache ? PyDict_GetItemWithError(cache, f->name) : NULL;
    if (hit) {
      *op = (dlfuse_op_t)PyLong_AsVoidPtr(hit);
      Py_DECREF(cache);
      return PyErr_Occurred() ? -1 : 0;
    }
    if (PyErr_Occurred()) {
      Py_XDECREF(cache);
      return -1;
    }
  }
  int st = S.op_get((dlfuse_registry_t)*h, name, op);
  /* The op has a schema (above), so it exists: no plugin serving it is UNSUPPORTED, as for
   * a device or dtype no plugin serves. */
  if (st == DLFUSE_STATUS_NOT_FOUND) st = DLFUSE_STATUS_UNSUPPORTED;
  if (st) {
    Py_XDECREF(cache);
    return raise_status(st, NULL);
  }
  if (cache) {
    PyObject* v = PyLong_FromVoidPtr(*op);
    int rc = v ? PyDict_SetItem(cache, f->name, v) : -1;
    Py_XDECREF(v);
    Py_DECREF(cache);
    if (rc < 0) return -1;
  }
  if (!is_default && *h) {
    PyObject* ref = PyWeakref_NewRef(regobj, NULL);
    if (!ref) {
      PyErr_Clear(); /* a registry object without weak references: no fast path */
    } else {
      Py_XSETREF(f->last_reg_ref, ref);
      f->last_reg_h = *h;
      f->last_reg_op = *op;
    }
  }
  if (is_default) {
    f->op = *op;
    f->op_reg = *h;
  }
  return 0;
}

static PyObject* opfunc_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwn) {
  OpFunc* f = (OpFunc*)self;
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  /* The registry argument first (it decides the schema): by keyword only. */
  PyObject* regobj = NULL;
  Py_ssize_t nkw = kwn ? PyTuple_GET_SIZE(kwn) : 0;
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject* key = PyTuple_GET_ITEM(kwn, k);
    if (key == S.s_registry || PyUnicode_Compare(key, S.s_registry) == 0) regobj = args[nargs + k];
  }
  void* h;
  dlfuse_op_t op;
  if (opfunc_prepare(f, regobj, &h, &op) < 0) return NULL;
  const Sig* g = &f->sig;
  const char* fn = PyUnicode_AsUTF8(f->name);
  PyObject* p[MAX_PARAMS];
  for (int i = 0; i < g->np; ++i) p[i] = NULL;
  if (nargs > g->npos) {
    PyErr_Format(PyExc_TypeError, "%s() takes at most %d positional arguments (%zd given)", fn, g->npos, nargs);
    return NULL;
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) p[i] = args[i];
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject* key = PyTuple_GET_ITEM(kwn, k);
    int found = -1;
    for (int i = 0; i < g->np && found < 0; ++i) /* call sites' keywords are interned: identity first */
      if (key == g->p[i].name) found = i;
    for (int i = 0; i < g->np && found < 0; ++i)
      if (PyUnicode_Compare(key, g->p[i].name) == 0) found = i;
    if (found < 0) {
      if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fn, key);
      return NULL;
    }
    if (p[found]) {
      PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%U'", fn, g->p[found].name);
      return NULL;
    }
    p[found] = args[nargs + k];
  }
  for (int i = 0; i < g->nreq; ++i)
    if (!p[i]) {
      PyErr_Format(PyExc_TypeError, "%s() missing required argument '%U'", fn, g->p[i].name);
      return NULL;
    }
  Args A; /* only the entries of this op's counts are read: set those (a call's cost) */
  for (int i = 0; i < g->num_inputs; ++i) A.in[i] = NULL;
  for (int i = 0; i < g->num_outputs; ++i) A.out[i] = A.shape[i] = NULL, A.needs[i] = 1;
  A.nattrs = 0;
  A.all_outputs = 0;
  A.stream = A.registry = NULL;
  int have_relu = 0;
  const int relu_index = g->relu_index;
  for (int i = 0; i < g->np; ++i) {
    const Param* q = &g->p[i];
    PyObject* o = p[i];
    switch (q->kind) {
      case P_IN: A.in[q->index] = o; break;
      case P_OUT: A.out[q->index] = o; break;
      case P_SHAPE: A.shape[q->index] = o; break;
      case P_STREAM: A.stream = o; break;
      case P_REGISTRY: A.registry = o; break;
      case P_NEEDS:
        if (parse_needs_n(o, A.needs, g->num_outputs) < 0) return NULL;
        break;
      case P_ATTR:
        if (is_none(o)) break;
        if (attr_value(fn, &g->attr[q->index], g->attr_kind[q->index], o, &A.attrs[A.nattrs]) < 0) return NULL;
        if (q->index == relu_index) have_relu = 1;
        ++A.nattrs;
        break;
    }
  }
  if (relu_index >= 0 && !have_relu) { /* the core ops' documented default activation: relu */
    A.attrs[A.nattrs] = g->attr[relu_index].default_value;
    A.attrs[A.nattrs++].value.i64 = DLFUSE_ACT_RELU;
  }
  return run(fn, g, op, h, &A);
}

static PyObject* opfunc_new(PyTypeObject* tp, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"name", "positional", "nreq", "doc", NULL};
  PyObject *name, *positional = Py_None, *doc = Py_None;
  Py_ssize_t nreq = -1;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "U|OnO:OpFunction", kwlist, &name, &positional, &nreq, &doc)) return NULL;
  if (positional != Py_None && !PyTuple_Check(positional)) {
    PyErr_SetString(PyExc_TypeError, "OpFunction: positional must be a tuple of parameter names or None");
    return NULL;
  }
  OpFunc* f = (OpFunc*)tp->tp_alloc(tp, 0);
  if (!f) return NULL;
  f->vectorcall = opfunc_vectorcall;
  f->name = Py_NewRef(name);
  f->positional = Py_NewRef(positional);
  f->nreq = nreq;
  f->doc = Py_NewRef(doc);
  return (PyObject*)f;
}

static void opfunc_dealloc(OpFunc* f) {
  sig_clear(&f->sig);
  Py_XDECREF(f->last_reg_ref);
  Py_XDECREF(f->name);
  Py_XDECREF(f->positional);
  Py_XDECREF(f->doc);
  Py_TYPE(f)->tp_free((PyObject*)f);
}

static PyObject* opfunc_descr_get(PyObject* self, PyObject* obj, PyObject* type) {
  (void)obj;
  (void)type;
  return Py_NewRef(self); /* a plain function as a class attribute: no binding */
}

/* The parameters, in call order: [(name, kind, positional, required)], reading the schema
 * (the library is loaded) when not done yet. */
static PyObject* opfunc_parameters(OpFunc* f, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs > 1) {
    PyErr_SetString(PyExc_TypeError, "parameters(registry=None) takes at most one argument");
    return NULL;
  }
  PyObject* regobj = nargs ? args[0] : NULL;
  void* h;
  dlfuse_op_t op;
  if (!f->sig.ready && opfunc_prepare(f, regobj, &h, &op) < 0) {
    if (!f->sig.ready) return NULL;
    PyErr_Clear(); /* the op is known but no plugin offers it: the parameters still are */
  }
  static const char* const kinds[] = {"input", "output", "attribute", "needs", "shape", "stream", "registry"};
  const Sig* g = &f->sig;
  PyObject* l = PyList_New(g->np);
  if (!l) return NULL;
  for (int i = 0; i < g->np; ++i) {
    PyObject* t = Py_BuildValue("(Osii)", g->p[i].name, kinds[g->p[i].kind], i < g->npos, i < g->nreq);
    if (!t) {
      Py_DECREF(l);
      return NULL;
    }
    PyList_SET_ITEM(l, i, t);
  }
  return l;
}

static PyObject* opfunc_get_name(OpFunc* f, void* c) {
  (void)c;
  return Py_NewRef(f->name);
}
static PyObject* opfunc_get_doc(OpFunc* f, void* c) {
  (void)c;
  return Py_NewRef(f->doc);
}

static PyMethodDef opfunc_methods[] = {
    {"parameters", (PyCFunction)(void (*)(void))opfunc_parameters, METH_FASTCALL,
     "parameters(registry=None) -> [(name, kind, positional, required)]: the parameters derived from the op's "
     "schema (read from registry, default the default one, when not read yet)"},
    {NULL, NULL, 0, NULL}};
static PyGetSetDef opfunc_getset[] = {{"__name__", (getter)opfunc_get_name, NULL, NULL, NULL},
                                      {"__qualname__", (getter)opfunc_get_name, NULL, NULL, NULL},
                                      {"op", (getter)opfunc_get_name, NULL, "the op's name", NULL},
                                      {"__doc__", (getter)opfunc_get_doc, NULL, NULL, NULL},
                                      {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject OpFuncType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dlfuse._ext.OpFunction",
    .tp_basicsize = sizeof(OpFunc),
    .tp_dealloc = (destructor)opfunc_dealloc,
    .tp_vectorcall_offset = offsetof(OpFunc, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "OpFunction(name, positional=None, nreq=-1, doc=None): an op of libdlfuse as a Python function, "
              "its parameters derived from the op's schema",
    .tp_methods = opfunc_methods,
    .tp_getset = opfunc_getset,
    .tp_descr_get = opfunc_descr_get,
    .tp_new = opfunc_new,
};

/* call(op, inputs, attrs, out, stream, registry): dlfuse.call's native half. Every output
 * is allocated (or taken from out); the result is the output, or a tuple of them. */
static PyObject* py_call(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 6 || !PyUnicode_Check(args[0]) || !PyTuple_Check(args[1]) || !PyDict_Check(args[2])) {
    PyErr_SetString(PyExc_TypeError, "_ext.call(op: str, inputs: tuple, attrs: dict, out, stream, registry)");
    return NULL;
  }
  void* h;
  if (need_loaded() < 0 || parse_registry(args[5], &h) < 0) return NULL;
  const char* name = PyUnicode_AsUTF8(args[0]);
  if (!name) return NULL;
  dlfuse_op_t op = NULL;
  dlfuse_op_schema_t sc;
  if (op_with_schema(h, name, &op, &sc) < 0) return NULL;
  Sig* g = PyMem_Calloc(1, sizeof(Sig));
  if (!g) return PyErr_NoMemory();
  PyObject* r = NULL;
  PyObject* out_seq = NULL;
  Args A;
  memset(&A, 0, sizeof A);
  if (sig_build(g, &sc, NULL, -1) < 0) goto done;
  const Py_ssize_t nin = PyTuple_GET_SIZE(args[1]);
  if (nin != g->num_inputs) {
    PyErr_Format(PyExc_TypeError, "%s() takes %d inputs (%zd given)", name, g->num_inputs, nin);
    goto done;
  }
  for (Py_ssize_t i = 0; i < nin; ++i) A.in[i] = PyTuple_GET_ITEM(args[1], i);
  if (!is_none(args[3])) {
    out_seq = PySequence_Fast(args[3], "out: expected a sequence of tensors (None where to allocate)");
    if (!out_seq) goto done;
    if (PySequence_Fast_GET_SIZE(out_seq) != g->num_outputs) {
      PyErr_Format(PyExc_TypeError, "%s(): out: expected %d entries, got %zd", name, g->num_outputs,
                   PySequence_Fast_GET_SIZE(out_seq));
      goto done;
    }
    for (int i = 0; i < g->num_outputs; ++i) A.out[i] = PySequence_Fast_GET_ITEM(out_seq, i);
  }
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  while (PyDict_Next(args[2], &pos, &key, &value)) {
    const char* k = PyUnicode_AsUTF8(key);
    if (!k) goto done;
    int found = -1;
    for (int i = 0; i < g->num_attrs && found < 0; ++i)
      if (strcasecmp(g->attr[i].name, k) == 0) found = i;
    if (found < 0) {
      PyObject* names = PyList_New(0);
      for (int i = 0; names && i < g->num_attrs; ++i) {
        PyObject* n = PyUnicode_FromString(g->attr[i].name);
        if (!n || PyList_Append(names, n) < 0) Py_CLEAR(names);
        Py_XDECREF(n);
      }
      if (names) PyErr_Format(PyExc_TypeError, "%s() got an unexpected attribute '%s'; expected one of %R", name, k, names);
      Py_XDECREF(names);
      goto done;
    }
    if (attr_value(name, &g->attr[found], g->attr_kind[found], value, &A.attrs[A.nattrs]) < 0) goto done;
    ++A.nattrs;
  }
  for (int i = 0; i < g->num_outputs; ++i) A.needs[i] = 1;
  A.all_outputs = 1;
  A.stream = args[4];
  A.registry = args[5];
  r = run(name, g, op, h, &A);
done:
  Py_XDECREF(out_seq);
  sig_clear(g);
  PyMem_Free(g);
  return r;
}

/* schema(op, registry) -> (inputs, outputs, attrs) of an op, for layers that derive their own
 * signatures from it (dlfuse.torch, dlfuse.jax): inputs [(name, flags, since_minor)], outputs
 * [(name, flags, alias_input, shape_rule, shape_inputs)], attrs [(lower-case name, is_float,
 * required, default, key, kind)], kind how a value is taken (attr_kind: "float", "int", "flag"
 * or "activation"), as OpFunction takes it. */
static PyObject* py_schema(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 2 || !PyUnicode_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "_ext.schema(op: str, registry)");
    return NULL;
  }
  void* h;
  if (need_loaded() < 0 || parse_registry(args[1], &h) < 0) return NULL;
  const char* name = PyUnicode_AsUTF8(args[0]);
  if (!name) return NULL;
  dlfuse_op_schema_t sc;
  if (find_schema(h, name, &sc) < 0) return NULL;
  PyObject* ins = PyList_New(0);
  PyObject* outs = PyList_New(0);
  PyObject* ats = PyList_New(0);
  int ok = ins && outs && ats;
  for (int i = 0; ok && i < sc.num_inputs; ++i) {
    PyObject* t = Py_BuildValue("(sII)", sc.inputs[i].name, sc.inputs[i].flags, sc.inputs[i].since_minor);
    ok = t && PyList_Append(ins, t) == 0;
    Py_XDECREF(t);
  }
  for (int i = 0; ok && i < sc.num_outputs; ++i) {
    const dlfuse_arg_schema_t* o = &sc.outputs[i];
    PyObject* t = Py_BuildValue("(sIiiI)", o->name, o->flags, o->alias_input, o->shape_rule, o->shape_inputs);
    ok = t && PyList_Append(outs, t) == 0;
    Py_XDECREF(t);
  }
  for (int i = 0; ok && i < sc.num_attrs; ++i) {
    const dlfuse_attr_schema_t* a = &sc.attrs[i];
    const int is_float = a->default_value.type == DLFUSE_ATTR_FLOAT64;
    PyObject* n = lower_name(a->name);
    PyObject* d = is_float ? PyFloat_FromDouble(a->default_value.value.f64) : PyLong_FromLongLong(a->default_value.value.i64);
    PyObject* t = n && d ? Py_BuildValue("(OiiOis)", n, is_float, (a->flags & DLFUSE_ATTR_REQUIRED) != 0, d,
                                         (int)a->default_value.key, kind_names[attr_kind(a)])
                         : NULL;
    Py_XDECREF(n);
    Py_XDECREF(d);
    ok = t && PyList_Append(ats, t) == 0;
    Py_XDECREF(t);
  }
  if (!ok) {
    Py_XDECREF(ins);
    Py_XDECREF(outs);
    Py_XDECREF(ats);
    return NULL;
  }
  return Py_BuildValue("(NNN)", ins, outs, ats);
}

/* attrs[0 .. *n) from a dict {name (any case): value} of op `name`'s attributes. */
static int attrs_by_name(const char* name, const dlfuse_op_schema_t* sc, PyObject* dict, dlfuse_attr_t* attrs,
                         int32_t* n) {
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  *n = 0;
  while (PyDict_Next(dict, &pos, &key, &value)) {
    const char* k = PyUnicode_AsUTF8(key);
    if (!k) return -1;
    int found = -1;
    for (int i = 0; i < sc->num_attrs && found < 0; ++i)
      if (strcasecmp(sc->attrs[i].name, k) == 0) found = i;
    if (found < 0) {
      PyErr_Format(PyExc_TypeError, "dlfuse: %s has no attribute '%s'", name, k);
      return -1;
    }
    if (attr_value(name, &sc->attrs[found], attr_kind(&sc->attrs[found]), value, &attrs[*n]) < 0) return -1;
    ++*n;
  }
  return 0;
}

/* backward_plan(op, attrs, device_type, code, bits, registry) -> (backward op, keep, write):
 * dlfuse_op_backward_plan for a call of op with attributes by name on that device type and
 * dtype: bit i of keep = backward input i is passed, bit k of write = forward output k is
 * written. */
static PyObject* py_backward_plan(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 6 || !PyUnicode_Check(args[0]) || !PyDict_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "_ext.backward_plan(op: str, attrs: dict, device_type, code, bits, registry)");
    return NULL;
  }
  void* h;
  if (need_loaded() < 0 || parse_registry(args[5], &h) < 0) return NULL;
  const char* name = PyUnicode_AsUTF8(args[0]);
  const int device = PyLong_AsLong(args[2]), code = PyLong_AsLong(args[3]), bits = PyLong_AsLong(args[4]);
  if (!name || PyErr_Occurred()) return NULL;
  if (!S.op_backward_plan) {
    PyErr_SetString(PyExc_NotImplementedError, "dlfuse: backward_plan needs libdlfuse of ABI >= 1.2");
    return NULL;
  }
  dlfuse_op_t op = NULL, bwd = NULL;
  dlfuse_op_schema_t sc, bsc;
  dlfuse_attr_t attrs[DLFUSE_MAX_ATTRS];
  int32_t nattrs = 0;
  if (op_with_schema(h, name, &op, &sc) < 0 || attrs_by_name(name, &sc, args[1], attrs, &nattrs) < 0) return NULL;
  const DLDataType dtype = {(uint8_t)code, (uint8_t)bits, 1};
  uint32_t keep = 0, write = 0;
  const int st = S.op_backward_plan(op, attrs, nattrs, device, dtype, &bwd, &keep, &write);
  if (st) return raise_status(st, NULL), NULL;
  memset(&bsc, 0, sizeof bsc);
  bsc.struct_size = sizeof bsc;
  if (S.op_schema(bwd, &bsc) != 0) return raise_status(DLFUSE_STATUS_INTERNAL, NULL), NULL;
  return Py_BuildValue("(sII)", bsc.name, keep, write);
}

/* infer(op, shapes, code, bits, attrs, registry) -> [shape per output]: the output shapes of
 * a call of op on inputs of `shapes` (a sequence, None where an optional input is absent)
 * and one dtype, attributes by name as for dlfuse.call. For shape-only callers (the fake
 * kernels of dlfuse.torch): no tensor is touched. */
static PyObject* py_infer(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 6 || !PyUnicode_Check(args[0]) || !PyDict_Check(args[4])) {
    PyErr_SetString(PyExc_TypeError, "_ext.infer(op: str, shapes, code, bits, attrs: dict, registry)");
    return NULL;
  }
  void* h;
  if (need_loaded() < 0 || parse_registry(args[5], &h) < 0) return NULL;
  const char* name = PyUnicode_AsUTF8(args[0]);
  const int code = PyLong_AsLong(args[2]), bits = PyLong_AsLong(args[3]);
  if (!name || PyErr_Occurred()) return NULL;
  if (!S.op_infer || !S.op_schema) {
    PyErr_SetString(PyExc_NotImplementedError, "dlfuse: infer needs libdlfuse of ABI >= 1.2");
    return NULL;
  }
  dlfuse_op_t op = NULL;
  dlfuse_op_schema_t sc;
  int st;
  if (op_with_schema(h, name, &op, &sc) < 0) return NULL;
  PyObject* seq = PySequence_Fast(args[1], "infer: shapes must be a sequence (None where an input is absent)");
  if (!seq) return NULL;
  PyObject* r = NULL;
  const Py_ssize_t nin = PySequence_Fast_GET_SIZE(seq);
  Shape* sh = PyMem_Calloc(DLFUSE_MAX_ARGS, sizeof(Shape));
  if (!sh) {
    Py_DECREF(seq);
    return PyErr_NoMemory();
  }
  DLTensor t[DLFUSE_MAX_ARGS];
  const DLTensor* in[DLFUSE_MAX_ARGS];
  dlfuse_attr_t attrs[DLFUSE_MAX_ATTRS];
  int32_t nattrs = 0;
  if (nin != sc.num_inputs) {
    PyErr_Format(PyExc_TypeError, "infer: %s takes %d inputs, got %zd shapes", name, sc.num_inputs, nin);
    goto done;
  }
  for (Py_ssize_t i = 0; i < nin; ++i) {
    PyObject* o = PySequence_Fast_GET_ITEM(seq, i);
    in[i] = NULL;
    if (o == Py_None) continue;
    if (parse_shape(o, "infer: a shape must be a sequence of ints", &sh[i]) < 0) goto done;
    if (sh[i].ndim > DLFUSE_MAX_NDIM) {
      PyErr_Format(PyExc_ValueError, "infer: input %zd has %d dims (at most %d)", i, sh[i].ndim, DLFUSE_MAX_NDIM);
      goto done;
    }
    memset(&t[i], 0, sizeof t[i]);
    t[i].ndim = sh[i].ndim;
    t[i].shape = sh[i].d;
    t[i].dtype.code = (uint8_t)code;
    t[i].dtype.bits = (uint8_t)bits;
    t[i].dtype.lanes = 1;
    t[i].device.device_type = kDLCPU;
    in[i] = &t[i];
  }
  if (attrs_by_name(name, &sc, args[4], attrs, &nattrs) < 0) goto done;
  {
    int32_t ndims[DLFUSE_MAX_ARGS];
    int64_t shapes[DLFUSE_MAX_ARGS * DLFUSE_MAX_NDIM];
    DLDataType dtypes[DLFUSE_MAX_ARGS];
    st = S.op_infer(op, in, (int32_t)nin, attrs, nattrs, sc.num_outputs, ndims, shapes, dtypes);
    if (st) {
      raise_status(st, NULL);
      goto done;
    }
    r = PyList_New(sc.num_outputs);
    for (int32_t i = 0; r && i < sc.num_outputs; ++i) {
      Shape o;
      o.ndim = ndims[i];
      memcpy(o.d, shapes + (size_t)i * DLFUSE_MAX_NDIM, sizeof(int64_t) * (size_t)ndims[i]);
      PyObject* tup = shape_tuple(&o);
      if (!tup) {
        Py_CLEAR(r);
        break;
      }
      PyList_SET_ITEM(r, i, tup);
    }
  }
done:
  PyMem_Free(sh);
  Py_DECREF(seq);
  return r;
}

/* The names of the ops of the table this module was compiled with (dlfuse/ops.def), for the
 * functions the package makes before libdlfuse is loaded. */
static PyObject* py_core_ops(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  static const char* const names[] = {
#define DLFUSE_OP(op, since) #op,
#define DLFUSE_IN(op, name, flags, since)
#define DLFUSE_OUT(op, name, flags, rule, s0, s1, s2, alias)
#define DLFUSE_ATTR(op, key, type, flags, def, lo, hi)
#define DLFUSE_END(op)
#include "dlfuse/ops.def"
#undef DLFUSE_OP
#undef DLFUSE_IN
#undef DLFUSE_OUT
#undef DLFUSE_ATTR
#undef DLFUSE_END
  };
  const Py_ssize_t n = (Py_ssize_t)(sizeof names / sizeof names[0]);
  PyObject* t = PyTuple_New(n);
  for (Py_ssize_t i = 0; t && i < n; ++i) {
    PyObject* s = PyUnicode_FromString(names[i]);
    if (!s) {
      Py_CLEAR(t);
      break;
    }
    PyTuple_SET_ITEM(t, i, s);
  }
  return t;
}

/* The names of every op with a schema in a registry: the core ops, then the plugins' own. */
static PyObject* py_op_names(PyObject* self, PyObject* regobj) {
  (void)self;
  void* h;
  if (need_loaded() < 0 || parse_registry(regobj, &h) < 0) return NULL;
  if (!S.op_count || !S.reg_op_schema) return PyList_New(0);
  int32_t n = 0;
  int st = S.op_count((dlfuse_registry_t)h, &n);
  if (st) return raise_status(st, NULL), NULL;
  PyObject* l = PyList_New(0);
  for (int32_t i = 0; l && i < n; ++i) {
    dlfuse_op_schema_t sc;
    memset(&sc, 0, sizeof sc);
    sc.struct_size = sizeof sc;
    if (S.reg_op_schema((dlfuse_registry_t)h, i, &sc) || !sc.name) continue;
    PyObject* s = PyUnicode_FromString(sc.name);
    if (!s || PyList_Append(l, s) < 0) Py_CLEAR(l);
    Py_XDECREF(s);
  }
  return l;
}

static int admin_bind(void* lib, const char* path);

static PyObject* py_load(PyObject* self, PyObject* args) {
  (void)self;
  const char* path;
  PyObject *errors, *tensor_type, *fallback, *defreg;
  if (!PyArg_ParseTuple(args, "sO!OOO", &path, &PyTuple_Type, &errors, &tensor_type, &fallback, &defreg))
    return NULL;
  /* RTLD_NOLOAD first: a library of this path already in the process is shared. */
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!lib) lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    PyErr_Format(PyExc_OSError, "dlfuse._ext: dlopen(%s): %s", path, e ? e : "failed");
    return NULL;
  }
  /* ABI 1.0's entry points are required; the 1.2 ones are optional, so that an older
   * libdlfuse still loads and its ops say what they need. */
  const char* syms[] = {"dlfuse_last_error", "dlfuse_op_get", "dlfuse_op_call"};
  void* f[3];
  for (int i = 0; i < 3; ++i) {
    f[i] = dlsym(lib, syms[i]);
    if (!f[i]) {
      dlclose(lib);
      PyErr_Format(PyExc_OSError, "dlfuse._ext: %s has no %s: not libdlfuse", path, syms[i]);
      return NULL;
    }
  }
  if (admin_bind(lib, path) < 0) {
    dlclose(lib);
    return NULL;
  }
  if (S.lib) dlclose(S.lib);
  S.lib = lib;
  memcpy(&S.last_error, &f[0], sizeof f[0]);
  memcpy(&S.op_get, &f[1], sizeof f[1]);
  memcpy(&S.op_call, &f[2], sizeof f[2]);
  void* g[5] = {dlsym(lib, "dlfuse_op_schema"), dlsym(lib, "dlfuse_op_infer_outputs"),
                dlsym(lib, "dlfuse_registry_op_count"), dlsym(lib, "dlfuse_registry_op_schema"),
                dlsym(lib, "dlfuse_op_backward_plan")};
  memcpy(&S.op_schema, &g[0], sizeof g[0]);
  memcpy(&S.op_infer, &g[1], sizeof g[1]);
  memcpy(&S.op_count, &g[2], sizeof g[2]);
  memcpy(&S.reg_op_schema, &g[3], sizeof g[3]);
  memcpy(&S.op_backward_plan, &g[4], sizeof g[4]);
  for (int i = 0; i < 16; ++i) {
    Py_CLEAR(S.errors[i]);
    if (i < PyTuple_GET_SIZE(errors)) S.errors[i] = Py_NewRef(PyTuple_GET_ITEM(errors, i));
  }
  Py_XSETREF(S.tensor_type, Py_NewRef(tensor_type));
  Py_XSETREF(S.alloc_fallback, Py_NewRef(fallback));
  Py_XSETREF(S.default_registry, Py_NewRef(defreg));
  Py_CLEAR(S.default_registry_obj);
  /* the file the loader took (a bare name is searched on the loader's path) */
  Dl_info info;
  if (dladdr((void*)(uintptr_t)S.op_call, &info) && info.dli_fname) return PyUnicode_DecodeFSDefault(info.dli_fname);
  return PyUnicode_DecodeFSDefault(path);
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

/* ---- the registry's admin calls, device memory, DLPack export ---------------------------------
 *
 * What is not per call, on the same loaded library: the package's Registry and Tensor
 * (dlfuse/_core.py) call these with plain ints for handles, devices and addresses. Each
 * raises the package's exception with the C message on failure. */

#define ADMIN_FNS(X)                                                                                        \
  X(abi_version, dlfuse_abi_version)                                                                      \
  X(registry_create, dlfuse_registry_create)                                                              \
  X(registry_destroy, dlfuse_registry_destroy)                                                            \
  X(registry_load, dlfuse_registry_load)                                                                  \
  X(plugin_count, dlfuse_registry_plugin_count)                                                           \
  X(plugin_info, dlfuse_registry_plugin_info)                                                             \
  X(kernel_info, dlfuse_registry_kernel_info)                                                             \
  X(prefer, dlfuse_registry_prefer)                                                                       \
  X(op_resolve, dlfuse_op_resolve)                                                                        \
  X(device_count, dlfuse_device_count)                                                                    \
  X(device_alloc, dlfuse_device_alloc)                                                                    \
  X(device_free, dlfuse_device_free)                                                                      \
  X(device_copy, dlfuse_device_copy)                                                                      \
  X(device_synchronize, dlfuse_device_synchronize)

static struct {
#define X(field, sym) __typeof__(&sym) field;
  ADMIN_FNS(X)
#undef X
} A_;

static int admin_bind(void* lib, const char* path) {
#define X(field, sym)                                                                        \
  {                                                                                          \
    void* f = dlsym(lib, #sym);                                                              \
    if (!f) {                                                                                \
      PyErr_Format(PyExc_OSError, "dlfuse._ext: %s has no %s: not libdlfuse", path, #sym); \
      return -1;                                                                             \
    }                                                                                        \
    memcpy(&A_.field, &f, sizeof f);                                                         \
  }
  ADMIN_FNS(X)
#undef X
  return 0;
}

static int need_lib(void) {
  if (A_.registry_create) return 0;
  return need_loaded();
}

static int check(int st) { return st ? raise_status(st, NULL) : 0; }

static void* as_ptr(PyObject* o) { return o == Py_None ? NULL : PyLong_AsVoidPtr(o); }

static PyObject* py_abi_version(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  if (need_lib() < 0) return NULL;
  uint32_t ma = 0, mi = 0;
  A_.abi_version(&ma, &mi);
  return Py_BuildValue("(II)", ma, mi);
}

static PyObject* py_last_error(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  if (need_lib() < 0) return NULL;
  const char* m = S.last_error();
  return PyUnicode_DecodeUTF8(m ? m : "", (Py_ssize_t)strlen(m ? m : ""), "replace");
}

/* registry_create(plugin_paths: str | None, discovery: int) -> handle */
static PyObject* py_registry_create(PyObject* self, PyObject* args) {
  (void)self;
  const char* paths = NULL;
  unsigned int discovery;
  if (!PyArg_ParseTuple(args, "zI:registry_create", &paths, &discovery) || need_lib() < 0) return NULL;
  dlfuse_registry_options_t o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.discovery = discovery;
  o.plugin_paths = paths;
  dlfuse_registry_t h = NULL;
  int st;
  Py_BEGIN_ALLOW_THREADS
  st = A_.registry_create(&o, &h);
  Py_END_ALLOW_THREADS
  if (check(st) < 0) return NULL;
  return PyLong_FromVoidPtr(h);
}

static PyObject* py_registry_destroy(PyObject* self, PyObject* h) {
  (void)self;
  void* p = as_ptr(h);
  if (PyErr_Occurred() || need_lib() < 0) return NULL;
  Py_BEGIN_ALLOW_THREADS
  A_.registry_destroy((dlfuse_registry_t)p);
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

/* registry_load(h, path) -> index; raises (the file stays listed) on failure */
static PyObject* py_registry_load(PyObject* self, PyObject* args) {
  (void)self;
  PyObject* h;
  const char* path;
  if (!PyArg_ParseTuple(args, "Os:registry_load", &h, &path) || need_lib() < 0) return NULL;
  void* p = as_ptr(h);
  if (PyErr_Occurred()) return NULL;
  int32_t idx = -1;
  int st;
  Py_BEGIN_ALLOW_THREADS
  st = A_.registry_load((dlfuse_registry_t)p, path, &idx);
  Py_END_ALLOW_THREADS
  if (check(st) < 0) return NULL;
  return PyLong_FromLong(idx);
}

static PyObject* py_plugin_count(PyObject* self, PyObject* h) {
  (void)self;
  void* p = as_ptr(h);
  if (PyErr_Occurred() || need_lib() < 0) return NULL;
  int32_t n = 0;
  if (check(A_.plugin_count((dlfuse_registry_t)p, &n)) < 0) return NULL;
  return PyLong_FromLong(n);
}

static PyObject* str_or_empty(const char* s) {
  return PyUnicode_DecodeUTF8(s ? s : "", (Py_ssize_t)strlen(s ? s : ""), "replace");
}

/* plugin_info(h, i) -> (name, version, path, available, reason, device_type, device_count,
 * abi_major, abi_minor, num_kernels) */
static PyObject* py_plugin_info(PyObject* self, PyObject* args) {
  (void)self;
  PyObject* h;
  int i;
  if (!PyArg_ParseTuple(args, "Oi:plugin_info", &h, &i) || need_lib() < 0) return NULL;
  void* p = as_ptr(h);
  if (PyErr_Occurred()) return NULL;
  dlfuse_plugin_info_t in;
  memset(&in, 0, sizeof in);
  in.struct_size = sizeof in;
  if (check(A_.plugin_info((dlfuse_registry_t)p, i, &in)) < 0) return NULL;
  return Py_BuildValue("(NNNiNiiIIi)", str_or_empty(in.name), str_or_empty(in.version), str_or_empty(in.path),
                       (int)in.available, str_or_empty(in.reason), (int)in.device_type, (int)in.device_count,
                       in.abi_major, in.abi_minor, (int)in.num_kernels);
}

/* kernel_info(h, plugin, kernel) -> (op, device_type, [(code, bits)], priority, flags) */
static PyObject* py_kernel_info(PyObject* self, PyObject* args) {
  (void)self;
  PyObject* h;
  int pl, k;
  if (!PyArg_ParseTuple(args, "Oii:kernel_info", &h, &pl, &k) || need_lib() < 0) return NULL;
  void* p = as_ptr(h);
  if (PyErr_Occurred()) return NULL;
  dlfuse_kernel_info_t ki;
  memset(&ki, 0, sizeof ki);
  ki.struct_size = sizeof ki;
  if (check(A_.kernel_info((dlfuse_registry_t)p, pl, k, &ki)) < 0) return NULL;
  PyObject* dts = PyList_New(0);
  for (int32_t j = 0; dts && j < ki.num_dtypes && ki.dtypes; ++j) {
    PyObject* t = Py_BuildValue("(ii)", (int)ki.dtypes[j].code, (int)ki.dtypes[j].bits);
    if (!t || PyList_Append(dts, t) < 0) Py_CLEAR(dts);
    Py_XDECREF(t);
  }
  if (!dts) return NULL;
  return Py_BuildValue("(NiNiI)", str_or_empty(ki.op), (int)ki.device_type, dts, (int)ki.priority, ki.flags);
}

/* prefer(h, op | None, plugin_name | None) */
static PyObject* py_prefer(PyObject* self, PyObject* args) {
  (void)self;
  PyObject* h;
  const char *op, *name;
  if (!PyArg_ParseTuple(args, "Ozz:prefer", &h, &op, &name) || need_lib() < 0) return NULL;
  void* p = as_ptr(h);
  if (PyErr_Occurred() || check(A_.prefer((dlfuse_registry_t)p, op, name)) < 0) return NULL;
  Py_RETURN_NONE;
}

/* resolve(h, op, device_type, code, bits) -> plugin index */
static PyObject* py_resolve(PyObject* self, PyObject* args) {
  (void)self;
  PyObject* h;
  const char* name;
  int dev, code, bits;
  if (!PyArg_ParseTuple(args, "Osiii:resolve", &h, &name, &dev, &code, &bits) || need_lib() < 0) return NULL;
  void* p = as_ptr(h);
  if (PyErr_Occurred()) return NULL;
  dlfuse_op_t op = NULL;
  if (check(S.op_get((dlfuse_registry_t)p, name, &op)) < 0) return NULL;
  DLDataType dt = {(uint8_t)code, (uint8_t)bits, 1};
  int32_t idx = -1;
  if (check(A_.op_resolve(op, dev, dt, &idx)) < 0) return NULL;
  return PyLong_FromLong(idx);
}

static PyObject* py_device_count(PyObject* self, PyObject* args) {
  (void)self;
  PyObject* h;
  int dev;
  if (!PyArg_ParseTuple(args, "Oi:device_count", &h, &dev) || need_lib() < 0) return NULL;
  void* p = as_ptr(h);
  if (PyErr_Occurred()) return NULL;
  int32_t n = 0;
  if (check(A_.device_count((dlfuse_registry_t)p, dev, &n)) < 0) return NULL;
  return PyLong_FromLong(n);
}

/* device_alloc(h, device_type, device_id, nbytes) -> address */
static PyObject* py_device_alloc(PyObject* self, PyObject* args) {
  (void)self;
  PyObject* h;
  int dt, di;
  unsigned long long n;
  if (!PyArg_ParseTuple(args, "OiiK:device_alloc", &h, &dt, &di, &n) || need_lib() < 0) return NULL;
  void* p = as_ptr(h);
  if (PyErr_Occurred()) return NULL;
  DLDevice d = {(DLDeviceType)dt, di};
  void* ptr = NULL;
  int st;
  Py_BEGIN_ALLOW_THREADS
  st = A_.device_alloc((dlfuse_registry_t)p, d, (size_t)n, &ptr);
  Py_END_ALLOW_THREADS
  if (check(st) < 0) return NULL;
  return PyLong_FromVoidPtr(ptr);
}

static PyObject* py_device_free(PyObject* self, PyObject* args) {
  (void)self;
  PyObject *h, *ptr;
  int dt, di;
  if (!PyArg_ParseTuple(args, "OiiO:device_free", &h, &dt, &di, &ptr) || need_lib() < 0) return NULL;
  void* p = as_ptr(h);
  void* q = as_ptr(ptr);
  if (PyErr_Occurred()) return NULL;
  DLDevice d = {(DLDeviceType)dt, di};
  if (check(A_.device_free((dlfuse_registry_t)p, d, q)) < 0) return NULL;
  Py_RETURN_NONE;
}

/* device_copy(h, device_type, device_id, kind, dst, dst_offset, src, src_offset, nbytes, stream) */
static PyObject* py_device_copy(PyObject* self, PyObject* args) {
  (void)self;
  PyObject *h, *dst, *src, *stream;
  int dt, di, kind;
  unsigned long long doff, soff, n;
  if (!PyArg_ParseTuple(args, "OiiiOKOKKO:device_copy", &h, &dt, &di, &kind, &dst, &doff, &src, &soff, &n, &stream) ||
      need_lib() < 0)
    return NULL;
  void* p = as_ptr(h);
  void* dp = as_ptr(dst);
  void* sp = as_ptr(src);
  void* s = as_ptr(stream);
  if (PyErr_Occurred()) return NULL;
  DLDevice d = {(DLDeviceType)dt, di};
  int st;
  Py_BEGIN_ALLOW_THREADS
  st = A_.device_copy((dlfuse_registry_t)p, d, (dlfuse_copy_kind_t)kind, dp, (size_t)doff, sp, (size_t)soff, (size_t)n, s);
  Py_END_ALLOW_THREADS
  if (check(st) < 0) return NULL;
  Py_RETURN_NONE;
}

static PyObject* py_device_synchronize(PyObject* self, PyObject* args) {
  (void)self;
  PyObject *h, *stream;
  int dt, di;
  if (!PyArg_ParseTuple(args, "OiiO:device_synchronize", &h, &dt, &di, &stream) || need_lib() < 0) return NULL;
  void* p = as_ptr(h);
  void* s = as_ptr(stream);
  if (PyErr_Occurred()) return NULL;
  DLDevice d = {(DLDeviceType)dt, di};
  int st;
  Py_BEGIN_ALLOW_THREADS
  st = A_.device_synchronize((dlfuse_registry_t)p, d, s);
  Py_END_ALLOW_THREADS
  if (check(st) < 0) return NULL;
  Py_RETURN_NONE;
}

/* symbol(name) -> the address of a libdlfuse function (for the XLA handlers, which take
 * libdlfuse's entry points as pointers) */
static PyObject* py_symbol(PyObject* self, PyObject* name) {
  (void)self;
  const char* n = PyUnicode_AsUTF8(name);
  if (!n || need_lib() < 0) return NULL;
  void* f = dlsym(S.lib, n);
  if (!f) {
    PyErr_Format(PyExc_AttributeError, "libdlfuse has no symbol %s", n);
    return NULL;
  }
  return PyLong_FromVoidPtr(f);
}

/* A DLTensor describing a dlfuse.Tensor's memory, in a capsule that owns it and its shape:
 * dltensor(data, device_type, device_id, shape, code, bits) -> (capsule, address). */
typedef struct {
  DLTensor t;
  int64_t shape[DLFUSE_MAX_NDIM];
} OwnedTensor;

static void owned_tensor_free(PyObject* cap) { PyMem_Free(PyCapsule_GetPointer(cap, "dlfuse.dltensor")); }

static PyObject* py_dltensor(PyObject* self, PyObject* args) {
  (void)self;
  PyObject *data, *shape;
  int dt, di, code, bits;
  if (!PyArg_ParseTuple(args, "OiiO!ii:dltensor", &data, &dt, &di, &PyTuple_Type, &shape, &code, &bits)) return NULL;
  Py_ssize_t nd = PyTuple_GET_SIZE(shape);
  if (nd > DLFUSE_MAX_NDIM) {
    PyErr_Format(PyExc_ValueError, "dlfuse.Tensor: shape: expected at most %d dims, got %zd", DLFUSE_MAX_NDIM, nd);
    return NULL;
  }
  OwnedTensor* o = PyMem_Calloc(1, sizeof *o);
  if (!o) return PyErr_NoMemory();
  o->t.data = as_ptr(data);
  for (Py_ssize_t i = 0; i < nd; ++i) o->shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
  if (PyErr_Occurred()) {
    PyMem_Free(o);
    return NULL;
  }
  o->t.device.device_type = (DLDeviceType)dt;
  o->t.device.device_id = di;
  o->t.ndim = (int32_t)nd;
  o->t.dtype.code = (uint8_t)code;
  o->t.dtype.bits = (uint8_t)bits;
  o->t.dtype.lanes = 1;
  o->t.shape = o->shape;
  PyObject* cap = PyCapsule_New(o, "dlfuse.dltensor", owned_tensor_free);
  if (!cap) {
    PyMem_Free(o);
    return NULL;
  }
  return Py_BuildValue("(NN)", cap, PyLong_FromVoidPtr(&o->t));
}

/* DLPack export of a dlfuse.Tensor: export(owner, tensor_address, versioned) -> capsule. The
 * managed tensor holds a copy of the DLTensor and a reference to the owner, dropped by its
 * deleter (which a consumer may call from any thread, with its own exception pending) or by
 * the capsule's destructor when no consumer took it. */
typedef struct {
  DLManagedTensorVersioned mv;
  DLManagedTensor ml;
  int64_t shape[DLFUSE_MAX_NDIM];
  PyObject* owner;
} Export;

static void export_release_owner(Export* e) {
  if (!Py_IsInitialized()) return; /* a consumer freeing after interpreter exit */
  PyGILState_STATE g = PyGILState_Ensure();
#if PY_VERSION_HEX >= 0x030C0000
  PyObject* pending = PyErr_GetRaisedException();
#else
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
#endif
  Py_XDECREF(e->owner);
  PyMem_Free(e);
#if PY_VERSION_HEX >= 0x030C0000
  PyErr_SetRaisedException(pending);
#else
  PyErr_Restore(type, value, tb);
#endif
  PyGILState_Release(g);
}

static void export_deleter_v(DLManagedTensorVersioned* m) { export_release_owner((Export*)m->manager_ctx); }
static void export_deleter_l(DLManagedTensor* m) { export_release_owner((Export*)m->manager_ctx); }

static void export_capsule_destructor(PyObject* cap) {
  if (PyCapsule_IsValid(cap, "dltensor_versioned"))
    export_deleter_v((DLManagedTensorVersioned*)PyCapsule_GetPointer(cap, "dltensor_versioned"));
  else if (PyCapsule_IsValid(cap, "dltensor"))
    export_deleter_l((DLManagedTensor*)PyCapsule_GetPointer(cap, "dltensor"));
}

static PyObject* py_export(PyObject* self, PyObject* args) {
  (void)self;
  PyObject *owner, *addr;
  int versioned;
  if (!PyArg_ParseTuple(args, "OOp:export", &owner, &addr, &versioned)) return NULL;
  const DLTensor* t = (const DLTensor*)as_ptr(addr);
  if (!t) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "dlfuse.Tensor: the tensor is freed");
    return NULL;
  }
  Export* e = PyMem_Calloc(1, sizeof *e);
  if (!e) return PyErr_NoMemory();
  DLTensor* dst = versioned ? &e->mv.dl_tensor : &e->ml.dl_tensor;
  *dst = *t;
  memcpy(e->shape, t->shape, sizeof(int64_t) * (size_t)(t->ndim > 0 ? t->ndim : 0));
  dst->shape = e->shape;
  dst->strides = NULL;
  e->owner = Py_NewRef(owner);
  e->mv.version.major = 1;
  e->mv.version.minor = 0;
  e->mv.manager_ctx = e;
  e->mv.deleter = export_deleter_v;
  e->ml.manager_ctx = e;
  e->ml.deleter = export_deleter_l;
  PyObject* cap = versioned ? PyCapsule_New(&e->mv, "dltensor_versioned", export_capsule_destructor)
                            : PyCapsule_New(&e->ml, "dltensor", export_capsule_destructor);
  if (!cap) {
    Py_DECREF(owner);
    PyMem_Free(e);
  }
  return cap;
}

static PyMethodDef methods[] = {
    {"load", py_load, METH_VARARGS, "load(path, errors, Tensor, alloc_fallback, registry) -> the loaded file"},
    {"call", (PyCFunction)(void (*)(void))py_call, METH_FASTCALL,
     "call(op, inputs, attrs, out, stream, registry)\n--\n\n"
     "Any op by name (ABI 1.2), by its schema: dlfuse.call's native half."},
    {"core_ops", py_core_ops, METH_NOARGS, "The names of the ops of the table this module was built with."},
    {"infer", (PyCFunction)(void (*)(void))py_infer, METH_FASTCALL,
     "infer(op, shapes, code, bits, attrs, registry) -> the output shapes of a call (dlfuse_op_infer_outputs)"},
    {"backward_plan", (PyCFunction)(void (*)(void))py_backward_plan, METH_FASTCALL,
     "backward_plan(op, attrs, device_type, code, bits, registry) -> (backward, keep, write) "
     "(dlfuse_op_backward_plan)"},
    {"schema", (PyCFunction)(void (*)(void))py_schema, METH_FASTCALL,
     "schema(op, registry) -> (inputs, outputs, attrs): [(name, flags, since)], [(name, flags, alias)], "
     "[(name, is_float, required, default)]"},
    {"op_names", py_op_names, METH_O, "op_names(registry or None): every op with a schema in the registry."},
    {"set_loader", py_set_loader, METH_O, "The callable the first op call runs to load libdlfuse."},
    {"exchange_api", py_exchange_api, METH_O,
     "The (major, minor) DLPack exchange API a type (or an object's type) offers, or None."},
    {"abi_version", py_abi_version, METH_NOARGS, "(major, minor) of the loaded libdlfuse"},
    {"last_error", py_last_error, METH_NOARGS, "the calling thread's last C error message"},
    {"registry_create", py_registry_create, METH_VARARGS, "registry_create(plugin_paths, discovery) -> handle"},
    {"registry_destroy", py_registry_destroy, METH_O, "registry_destroy(handle)"},
    {"registry_load", py_registry_load, METH_VARARGS, "registry_load(handle, path) -> plugin index"},
    {"plugin_count", py_plugin_count, METH_O, "plugin_count(handle)"},
    {"plugin_info", py_plugin_info, METH_VARARGS,
     "plugin_info(handle, i) -> (name, version, path, available, reason, device_type, device_count, abi_major, "
     "abi_minor, num_kernels)"},
    {"kernel_info", py_kernel_info, METH_VARARGS,
     "kernel_info(handle, plugin, kernel) -> (op, device_type, [(code, bits)], priority, flags)"},
    {"prefer", py_prefer, METH_VARARGS, "prefer(handle, op or None, plugin name or None)"},
    {"resolve", py_resolve, METH_VARARGS, "resolve(handle, op, device_type, code, bits) -> plugin index"},
    {"device_count", py_device_count, METH_VARARGS, "device_count(handle, device_type)"},
    {"device_alloc", py_device_alloc, METH_VARARGS, "device_alloc(handle, device_type, device_id, nbytes) -> address"},
    {"device_free", py_device_free, METH_VARARGS, "device_free(handle, device_type, device_id, address)"},
    {"device_copy", py_device_copy, METH_VARARGS,
     "device_copy(handle, device_type, device_id, kind, dst, dst_offset, src, src_offset, nbytes, stream)"},
    {"device_synchronize", py_device_synchronize, METH_VARARGS, "device_synchronize(handle, device_type, device_id, stream)"},
    {"symbol", py_symbol, METH_O, "the address of a libdlfuse function"},
    {"dltensor", py_dltensor, METH_VARARGS,
     "dltensor(data, device_type, device_id, shape, code, bits) -> (owner capsule, DLTensor address)"},
    {"export", py_export, METH_VARARGS, "export(owner, DLTensor address, versioned) -> a DLPack capsule holding owner"},
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
  I(s_ops, "_ops");
  I(s_registry, "registry");
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
  /* dlfuse_activation_t by name (gelu is gelu_erf) */
  static const struct {
    const char* n;
    int v;
  } acts[] = {{"identity", DLFUSE_ACT_IDENTITY}, {"relu", DLFUSE_ACT_RELU},     {"sigmoid", DLFUSE_ACT_SIGMOID},
              {"tanh", DLFUSE_ACT_TANH},         {"gelu", DLFUSE_ACT_GELU_ERF}, {"gelu_erf", DLFUSE_ACT_GELU_ERF},
              {"gelu_tanh", DLFUSE_ACT_GELU_TANH}, {"silu", DLFUSE_ACT_SILU}};
  S.activations = PyDict_New();
  if (!S.activations) goto fail;
  for (size_t i = 0; i < sizeof acts / sizeof acts[0]; ++i) {
    PyObject* v = PyLong_FromLong(acts[i].v);
    if (!v || PyDict_SetItemString(S.activations, acts[i].n, v) < 0) {
      Py_XDECREF(v);
      goto fail;
    }
    Py_DECREF(v);
  }
  S.activation_names = PyDict_Keys(S.activations);
  if (!S.activation_names || PyList_Sort(S.activation_names) < 0) goto fail;
  if (PyModule_AddObjectRef(m, "ACTIVATIONS", S.activations) < 0 ||
      PyModule_AddIntConstant(m, "ACT_COUNT", DLFUSE_ACT_COUNT) < 0 ||
      PyModule_AddIntConstant(m, "ATTR_ACTIVATION", DLFUSE_ATTR_ACTIVATION) < 0 ||
      PyModule_AddIntConstant(m, "ATTR_MULTIPLIER", DLFUSE_ATTR_MULTIPLIER) < 0 ||
      PyModule_AddIntConstant(m, "ATTR_ALLOW_TF32", DLFUSE_ATTR_ALLOW_TF32) < 0 ||
      PyModule_AddIntConstant(m, "ATTR_OUTPUT_ACTIVATION", DLFUSE_ATTR_OUTPUT_ACTIVATION) < 0 ||
      PyModule_AddIntConstant(m, "KERNEL_TAKES_V1_1_INPUTS", DLFUSE_KERNEL_TAKES_V1_1_INPUTS) < 0 ||
      PyModule_AddIntConstant(m, "COPY_HOST_TO_DEVICE", DLFUSE_COPY_HOST_TO_DEVICE) < 0 ||
      PyModule_AddIntConstant(m, "COPY_DEVICE_TO_HOST", DLFUSE_COPY_DEVICE_TO_HOST) < 0 ||
      PyModule_AddIntConstant(m, "DISCOVER_DEFAULT", DLFUSE_DISCOVER_DEFAULT) < 0)
    goto fail;
  if (PyType_Ready(&OpFuncType) < 0 || PyModule_AddObjectRef(m, "OpFunction", (PyObject*)&OpFuncType) < 0) goto fail;
  return m;
fail:
  Py_DECREF(m);
  return NULL;
}

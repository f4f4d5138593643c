/* The call path: a parsed call (Args) run through dlfuse_op_call, with its tensors imported,
 * the outputs it must allocate made (at the shapes the schema's rules give), the stream it
 * runs on chosen, and its result built; plus the argument parsers other files share. */
#include "ext.h"
#include "shape_rules.h" /* registry/src: the registry's own rules */

/* ---- arguments ----------------------------------------------------------------------------- */

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

int parse_registry(PyObject* o, void** h) {
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

int parse_needs_n(PyObject* o, int* needs, int n) {
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

int parse_shape(PyObject* o, const char* what, Shape* sh) {
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

/* ---- shapes and allocation ------------------------------------------------------------------ */

#if DLFUSE_HAVE_EXCHANGE_API
static void alloc_set_error(void* ctx, const char* kind, const char* message) {
  (void)ctx;
  PyObject* exc = PyExc_RuntimeError;
  if (kind && strcmp(kind, "MemoryError") == 0)
    exc = PyExc_MemoryError;
  else if (kind && strcmp(kind, "ValueError") == 0)
    exc = PyExc_ValueError;
  else if (kind && strcmp(kind, "TypeError") == 0)
    exc = PyExc_TypeError;
  PyErr_SetString(exc, message ? message : "DLPack allocator failed");
}
#endif

PyObject* shape_tuple(const Shape* s) {
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
    r = PyObject_CallFunction(S.alloc_fallback, "OOiiiiO", like, st, (int)lt->dtype.code, (int)lt->dtype.bits,
                              (int)lt->device.device_type, (int)lt->device.device_id, registry ? registry : Py_None);
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
int pick_stream(const View* v, int given, void** stream) {
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

/* ---- the call ----------------------------------------------------------------------------- */

static void release_all(View* vs, int n) {
  for (int i = 0; i < n; ++i) view_release(&vs[i]);
}

/* An output's shape by its schema's rule (MATMUL, BROADCAST, LIKE), for the calls that fit
 * it plainly; 0 otherwise (a callback rule, shapes the rule refuses), and the caller asks
 * dlfuse_op_infer_outputs, which also words the refusal. The rule is the registry's own code
 * (registry/src/shape_rules.c), called here because a call allocating its outputs pays this
 * on every call: a few dozen instructions against the registry's inference's ~1700. An op
 * reading more than three present inputs (no core op does) goes to the registry, which
 * checks those inputs before any rule. */
static int rule_shape(const dlfuse_arg_schema_t* o, const DLTensor* const* in, int nin, Shape* sh) {
  uint32_t r = o->shape_inputs;
  r &= r - 1, r &= r - 1, r &= r - 1;
  if (r) { /* more than three inputs read: count the present ones */
    int n = 0;
    for (int i = 0; i < nin && i < 32; ++i) n += ((o->shape_inputs >> i) & 1u) && in[i];
    if (n > 3) return 0;
  }
  int32_t ndim, at;
  if (dlfuse_shape_by_rule(o->shape_rule, o->shape_inputs, in, nin, sh->d, &ndim, &at) != DLFUSE_SHAPE_RULE_OK)
    return 0;
  sh->ndim = ndim;
  return 1;
}

PyObject* run(const char* fn, const Sig* g, dlfuse_op_t op, Args* A) {
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
      if (!(g->in[i].flags & DLFUSE_ARG_OPTIONAL) ||
          (first_form_required && (int)g->in[i].since_minor <= g->since_minor)) {
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
    if (A->all_outputs || !optional)
      want[i] = o != Py_False || !optional;
    else if (!g->has_required_out)
      want[i] = A->needs[i] && o != Py_False;
    else
      want[i] = o == Py_True;
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
      st = L.op_infer(op, in, nin, A->attrs, A->nattrs, nout, ndims, shapes, dtypes);
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
          raise_read_only(g->out[i].name);
          goto fail;
        }
        outs[i] = v[al].t;
        continue;
      }
    }
    if (view_import_out(res[i], g->out[i].name, s, &v[nin + i]) < 0) goto fail;
    outs[i] = v[nin + i].t;
  }
  Py_BEGIN_ALLOW_THREADS st = L.op_call(op, in, nin, outs, nout, A->attrs, A->nattrs, s);
  Py_END_ALLOW_THREADS if (st) {
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

PyMethodDef ext_call_methods[] = {
    {"current_stream", py_current_stream, METH_O,
     "The stream a call on this tensor runs on when no stream= is given (0: the plugin's default)."},
    {NULL, NULL, 0, NULL}};

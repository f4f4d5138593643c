/* OpFunction, the one callable type of every op: its arguments parsed by the signature
 * derived from the op's schema (vectorcall, no tuple/dict) and run; and call(), dlfuse.call's
 * native half, which runs any op by name. */
#include "ext.h"

typedef struct {
  PyObject_HEAD vectorcallfunc vectorcall;
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

/* The op's handle in registry h (cached for the default registry) and, the first time, its
 * parameters. */
static int opfunc_prepare(OpFunc* f, PyObject* regobj, void** h, dlfuse_op_t* op) {
  const char* name = named_op(f->name, regobj, h);
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
  if (!is_default && *h && f->last_reg_ref && PyWeakref_GetObject(f->last_reg_ref) == regobj && f->last_reg_h == *h) {
    *op = f->last_reg_op;
    return 0;
  }
  /* A Registry object keeps its own ops' handles (valid while its handle is: a closed one
   * has none, and the look-up below then fails). */
  PyObject* cache = NULL;
  if (!is_default && *h) {
    cache = PyObject_GetAttr(regobj, S.s_ops);
    if (!cache)
      PyErr_Clear();
    else if (!PyDict_Check(cache))
      Py_CLEAR(cache);
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
  int st = L.op_get((dlfuse_registry_t)*h, name, op);
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
  return run(fn, g, op, &A);
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

PyTypeObject OpFuncType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dlfuse._ext.OpFunction",
    .tp_basicsize = sizeof(OpFunc),
    .tp_dealloc = (destructor)opfunc_dealloc,
    .tp_vectorcall_offset = offsetof(OpFunc, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc =
        "OpFunction(name, positional=None, nreq=-1, doc=None): an op of libdlfuse as a Python function, "
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
  const char* name = named_op(args[0], args[5], &h);
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
      if (names)
        PyErr_Format(PyExc_TypeError, "%s() got an unexpected attribute '%s'; expected one of %R", name, k, names);
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
  r = run(name, g, op, &A);
done:
  Py_XDECREF(out_seq);
  sig_clear(g);
  PyMem_Free(g);
  return r;
}

PyMethodDef ext_op_function_methods[] = {{"call", (PyCFunction)(void (*)(void))py_call, METH_FASTCALL,
                                          "call(op, inputs, attrs, out, stream, registry)\n--\n\n"
                                          "Any op by name (ABI 1.2), by its schema: dlfuse.call's native half."},
                                         {NULL, NULL, 0, NULL}};

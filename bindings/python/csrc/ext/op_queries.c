/* Questions about ops answered without running one, for the layers that build on the op
 * schemas (dlfuse.torch, dlfuse.jax, the package's function table): schemas, output shapes
 * from shapes alone, backward plans, the op names. */
#include "ext.h"

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
  const char* name = named_op(args[0], args[1], &h);
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
    PyObject* d =
        is_float ? PyFloat_FromDouble(a->default_value.value.f64) : PyLong_FromLongLong(a->default_value.value.i64);
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
  const char* name = named_op(args[0], args[5], &h);
  const int device = PyLong_AsLong(args[2]), code = PyLong_AsLong(args[3]), bits = PyLong_AsLong(args[4]);
  if (!name || PyErr_Occurred()) return NULL;
  if (!L.op_backward_plan) {
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
  const int st = L.op_backward_plan(op, attrs, nattrs, device, dtype, &bwd, &keep, &write);
  if (st) return raise_status(st, NULL), NULL;
  memset(&bsc, 0, sizeof bsc);
  bsc.struct_size = sizeof bsc;
  if (L.op_schema(bwd, &bsc) != 0) return raise_status(DLFUSE_STATUS_INTERNAL, NULL), NULL;
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
  const char* name = named_op(args[0], args[5], &h);
  const int code = PyLong_AsLong(args[2]), bits = PyLong_AsLong(args[3]);
  if (!name || PyErr_Occurred()) return NULL;
  if (!L.op_infer || !L.op_schema) {
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
    st = L.op_infer(op, in, (int32_t)nin, attrs, nattrs, sc.num_outputs, ndims, shapes, dtypes);
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
/* X-lists over ops.def, kept as written: */
/* clang-format off */
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
  /* clang-format on */
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
  if (!L.op_count || !L.reg_op_schema) return PyList_New(0);
  int32_t n = 0;
  int st = L.op_count((dlfuse_registry_t)h, &n);
  if (st) return raise_status(st, NULL), NULL;
  PyObject* l = PyList_New(0);
  for (int32_t i = 0; l && i < n; ++i) {
    dlfuse_op_schema_t sc;
    memset(&sc, 0, sizeof sc);
    sc.struct_size = sizeof sc;
    if (L.reg_op_schema((dlfuse_registry_t)h, i, &sc) || !sc.name) continue;
    PyObject* s = PyUnicode_FromString(sc.name);
    if (!s || PyList_Append(l, s) < 0) Py_CLEAR(l);
    Py_XDECREF(s);
  }
  return l;
}

PyMethodDef ext_op_query_methods[] = {
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
    {NULL, NULL, 0, NULL}};

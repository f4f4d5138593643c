/* Signatures from op schemas: the Python parameters of an op (sig_build) from its schema
 * (dlfuse_registry_op_schema), how each attribute's value is taken and checked (attr_value),
 * and the schema look-ups by op name. */
#include "ext.h"

/* One callable type, OpFunc, serves every op: its parameters are derived from the op's
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

/* How the binding takes an attribute's value (K_*), from its schema alone: its declared
 * type, its name and its range. Keys are the op's own (docs/abi.md): a plugin may declare any
 * type under a number a core op uses for another attribute, so no key is compared here. */

static int is_activation_name(const char* n) {
  return n && (strcasecmp(n, "activation") == 0 || strcasecmp(n, "output_activation") == 0);
}

int attr_kind(const dlfuse_attr_schema_t* as) {
  if (as->default_value.type == DLFUSE_ATTR_FLOAT64) return K_FLOAT;
  if (is_activation_name(as->name)) return K_ACT; /* a dlfuse_activation_t: also by its name */
  if (as->min_value == 0 && as->max_value == 1) return K_FLAG;
  return K_INT;
}

const char* const kind_names[] = {"float", "int", "flag", "activation"};

/* The binding's default `activation` of relu (docs/python.md) belongs to the core ops' frozen
 * signatures: their schemas make ACTIVATION required. A plugin's op gets its schema's own
 * default, or none. */
static int relu_default(const dlfuse_op_schema_t* sc, const dlfuse_attr_schema_t* as) {
  return sc->plugin < 0 && attr_kind(as) == K_ACT && as->name && strcasecmp(as->name, "activation") == 0 &&
         (as->flags & DLFUSE_ATTR_REQUIRED);
}

void sig_clear(Sig* g) {
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

/* An attribute's parameter name: its schema name in lower case (ASCII), cut to 63 bytes. */
static void lower_into(char buf[64], const char* c) {
  size_t n = strlen(c);
  if (n >= 64) n = 63;
  for (size_t i = 0; i < n; ++i) buf[i] = (char)((c[i] >= 'A' && c[i] <= 'Z') ? c[i] - 'A' + 'a' : c[i]);
  buf[n] = 0;
}

PyObject* lower_name(const char* c) {
  char buf[64];
  lower_into(buf, c);
  return PyUnicode_InternFromString(buf);
}

/* The parameters of an op from its schema and the positional spec. */
int sig_build(Sig* g, const dlfuse_op_schema_t* sc, PyObject* positional, Py_ssize_t nreq) {
  sig_clear(g);
  if (sc->num_inputs < 0 || sc->num_inputs > DLFUSE_MAX_ARGS || sc->num_outputs < 1 ||
      sc->num_outputs > DLFUSE_MAX_ARGS || sc->num_attrs < 0 || sc->num_attrs > DLFUSE_MAX_ATTRS) {
    PyErr_Format(PyExc_RuntimeError, "dlfuse: op %s: a schema with %d inputs, %d outputs, %d attributes", sc->name,
                 sc->num_inputs, sc->num_outputs, sc->num_attrs);
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
      memmove(&g->p[sc->num_inputs + k + 1], &g->p[sc->num_inputs + k],
              sizeof(Param) * (size_t)(found - sc->num_inputs - k));
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
static int older_abi(const char* name) {
  PyErr_Format(PyExc_NotImplementedError,
               "dlfuse: %s needs libdlfuse of ABI >= 1.2 (op schemas); the loaded library is older", name);
  return -1;
}

int find_schema(void* h, const char* name, dlfuse_op_schema_t* sc) {
  if (!L.op_count || !L.reg_op_schema) return older_abi(name);
  int32_t n = 0;
  int st = L.op_count((dlfuse_registry_t)h, &n);
  if (st) return raise_status(st, NULL);
  for (int32_t i = 0; i < n; ++i) {
    memset(sc, 0, sizeof *sc);
    sc->struct_size = sizeof *sc;
    if (L.reg_op_schema((dlfuse_registry_t)h, i, sc) == 0 && sc->name && strcmp(sc->name, name) == 0) return 0;
  }
  char msg[256];
  snprintf(msg, sizeof msg, "op '%s': no core op or loaded plugin's op has this name", name);
  return raise_status(DLFUSE_STATUS_NOT_FOUND, msg);
}

/* The handle and schema of op `name` (ABI 1.2), or -1 with the exception set: NOT_FOUND for
 * a name with no schema, UNSUPPORTED where no plugin offers the op (as OpFunction). */
int op_with_schema(void* h, const char* name, dlfuse_op_t* op, dlfuse_op_schema_t* sc) {
  if (!L.op_schema) return older_abi(name);
  int st = L.op_get((dlfuse_registry_t)h, name, op);
  if (st == DLFUSE_STATUS_NOT_FOUND) { /* the registry's list tells the two apart */
    char msg[512];
    const char* why = L.last_error ? L.last_error() : NULL;
    snprintf(msg, sizeof msg, "%s", why ? why : "");
    if (find_schema(h, name, sc) < 0) return -1;
    return raise_status(DLFUSE_STATUS_UNSUPPORTED, msg);
  }
  if (st) return raise_status(st, NULL);
  memset(sc, 0, sizeof *sc);
  sc->struct_size = sizeof *sc;
  return (st = L.op_schema(*op, sc)) != 0 ? raise_status(st, NULL) : 0;
}

/* A bad attribute value: `kind` of exception, naming the attribute (its parameter name, lower
 * case), what it must be and what it got. Chains the conversion's own error, if any. */
static int bad_attr(PyObject* kind, const char* fn, const char* name, const char* expected, PyObject* value) {
  char low[64];
  lower_into(low, name);
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

/* A bad activation: what it must be names every activation. */
static int bad_activation(PyObject* kind, const char* fn, const char* name, PyObject* o) {
  PyObject* exp = PyUnicode_FromFormat("one of %S or a dlfuse_activation_t integer", S.activation_names);
  if (!exp) return -1;
  const char* e = PyUnicode_AsUTF8(exp);
  const int r = e ? bad_attr(kind, fn, name, e, o) : -1;
  Py_DECREF(exp);
  return r;
}

/* A dlfuse_activation_t: its name, or the integer (the registry checks the range). */
static int parse_activation(const char* fn, const char* name, PyObject* o, int64_t* act) {
  if (PyUnicode_Check(o)) {
    PyObject* v = PyDict_GetItemWithError(S.activations, o);
    if (!v) return PyErr_Occurred() ? -1 : bad_activation(PyExc_ValueError, fn, name, o);
    *act = PyLong_AsLongLong(v);
    return 0;
  }
  if (PyFloat_Check(o) || PyBytes_Check(o) || PyByteArray_Check(o)) return bad_activation(PyExc_TypeError, fn, name, o);
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
int attr_value(const char* fn, const dlfuse_attr_schema_t* as, int kind, PyObject* value, dlfuse_attr_t* a) {
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
    case K_ACT: return parse_activation(fn, as->name, value, &a->value.i64);
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

/* attrs[0 .. *n) from a dict {name (any case): value} of op `name`'s attributes. */
int attrs_by_name(const char* name, const dlfuse_op_schema_t* sc, PyObject* dict, dlfuse_attr_t* attrs, int32_t* n) {
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

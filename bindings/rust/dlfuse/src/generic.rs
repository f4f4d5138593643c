//! Any op by name (ABI 1.2): its schema is read from the registry, its outputs' shapes are
//! inferred by the registry (`dlfuse_op_infer_outputs`) and allocated on the host, then it
//! runs. No per-op code: the ops a plugin declares are called the same way as the core ops.
use std::ffi::CStr;
use std::os::raw::c_char;
use std::ptr;

use dlfuse_sys as sys;

use crate::error::{check, invalid, Result};
use crate::registry::{c_string, Registry};
use crate::tensor::{DataType, Element, TensorView, TensorViewMut};

/// An attribute's value; converted to the schema's type (an Int for a FLOAT64 attribute
/// is taken as that float).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AttrValue {
    Int(i64),
    Float(f64),
}

/// An input or output of an op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgSchema {
    pub name: String,
    /// May be absent (`None` as an input); an optional output is still computed by `call`,
    /// and left out by `call_with` given `OutputShape::Skip`.
    pub optional: bool,
    /// An output that may have any shape broadcasting to its inferred one (a gradient summed
    /// to a broadcast input's shape, such as `grad_bias`); `call` returns it at its inferred,
    /// widest shape, `call_with` at a shape the caller gives.
    pub reducible: bool,
}

/// An attribute of an op.
#[derive(Clone, Debug, PartialEq)]
pub struct AttrSchema {
    /// As the schema spells it; `call` matches names without regard to case.
    pub name: String,
    pub key: i32,
    pub required: bool,
    pub default: AttrValue,
}

/// An op's schema (`dlfuse_op_schema_t`).
#[derive(Clone, Debug, PartialEq)]
pub struct OpSchema {
    pub name: String,
    pub inputs: Vec<ArgSchema>,
    pub outputs: Vec<ArgSchema>,
    pub attrs: Vec<AttrSchema>,
    /// The plugin that declared it; `None` for a core op.
    pub plugin: Option<usize>,
}

/// How `call_with` makes one output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputShape<'s> {
    /// At the shape the registry infers (for a reducible output, its widest).
    Inferred,
    /// At this shape: for a reducible output, any shape that broadcasts to the inferred one
    /// (`grad_bias` at the bias's shape, say: the kernel sums over the broadcast dims); for
    /// any other output the registry accepts only the inferred shape.
    Given(&'s [i64]),
    /// Not computed: passed as NULL, as the C ABI allows for an optional output.
    Skip,
}

/// One output of `call`: its shape and its compact row-major data.
#[derive(Clone, Debug, PartialEq)]
pub struct Output<T> {
    pub shape: Vec<i64>,
    pub data: Vec<T>,
}

fn string(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the registry's strings are NUL-terminated and live as long as it does.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn attr_value(a: &sys::dlfuse_attr_t) -> AttrValue {
    // SAFETY: `type_` says which member is set.
    unsafe {
        if a.type_ == sys::DLFUSE_ATTR_FLOAT64 {
            AttrValue::Float(a.value.f64_)
        } else {
            AttrValue::Int(a.value.i64_)
        }
    }
}

fn args(p: *const sys::dlfuse_arg_schema_t, n: i32) -> Vec<ArgSchema> {
    (0..n.max(0) as usize)
        .map(|i| {
            // SAFETY: the schema holds n entries.
            let a = unsafe { &*p.add(i) };
            ArgSchema {
                name: string(a.name),
                optional: a.flags & sys::DLFUSE_ARG_OPTIONAL != 0,
                reducible: a.flags & sys::DLFUSE_ARG_REDUCIBLE != 0,
            }
        })
        .collect()
}

fn read_schema(s: &sys::dlfuse_op_schema_t) -> OpSchema {
    let attrs = (0..s.num_attrs.max(0) as usize)
        .map(|i| {
            // SAFETY: the schema holds num_attrs entries.
            let a = unsafe { &*s.attrs.add(i) };
            AttrSchema {
                name: string(a.name),
                key: a.default_value.key,
                required: a.flags & sys::DLFUSE_ATTR_REQUIRED != 0,
                default: attr_value(&a.default_value),
            }
        })
        .collect();
    OpSchema {
        name: string(s.name),
        inputs: args(s.inputs, s.num_inputs),
        outputs: args(s.outputs, s.num_outputs),
        attrs,
        plugin: if s.plugin < 0 { None } else { Some(s.plugin as usize) },
    }
}

fn empty_schema() -> sys::dlfuse_op_schema_t {
    sys::dlfuse_op_schema_t {
        struct_size: std::mem::size_of::<sys::dlfuse_op_schema_t>(),
        name: ptr::null(),
        since_minor: 0,
        num_inputs: 0,
        inputs: ptr::null(),
        num_outputs: 0,
        outputs: ptr::null(),
        num_attrs: 0,
        attrs: ptr::null(),
        shape_fn: None,
        plugin: -1,
    }
}

/// An op's handle, its schema, and a call's attributes in the registry's form.
struct Prepared {
    handle: sys::dlfuse_op_t,
    schema: OpSchema,
    attrs: Vec<sys::dlfuse_attr_t>,
}

fn in_pointers(dl_in: &[Option<sys::DLTensor>]) -> Vec<*const sys::DLTensor> {
    dl_in.iter().map(|t| t.as_ref().map_or(ptr::null(), |t| t as *const _)).collect()
}

// One dlfuse_op_call of a prepared op; absent tensors are None (NULL).
fn op_call(p: &Prepared, dl_in: &[Option<sys::DLTensor>], dl_out: &mut [Option<sys::DLTensor>]) -> Result<()> {
    let in_ptrs = in_pointers(dl_in);
    let out_ptrs: Vec<*mut sys::DLTensor> =
        dl_out.iter_mut().map(|t| t.as_mut().map_or(ptr::null_mut(), |t| t as *mut _)).collect();
    // SAFETY: every DLTensor describes memory borrowed for this call; the callers borrow
    // outputs mutably, so none aliases an input or another output.
    check(unsafe {
        sys::dlfuse_op_call(
            p.handle,
            in_ptrs.as_ptr(),
            in_ptrs.len() as i32,
            out_ptrs.as_ptr(),
            out_ptrs.len() as i32,
            p.attrs.as_ptr(),
            p.attrs.len() as i32,
            ptr::null_mut(),
        )
    })
}

impl Registry {
    /// Every op with a schema: the core ops, then those the loaded plugins declared.
    pub fn op_schemas(&self) -> Result<Vec<OpSchema>> {
        let mut n = 0i32;
        // SAFETY: valid registry and out-pointer.
        check(unsafe { sys::dlfuse_registry_op_count(self.as_raw(), &mut n) })?;
        (0..n)
            .map(|i| {
                let mut s = empty_schema();
                // SAFETY: valid registry, index in range, a struct of our size.
                check(unsafe { sys::dlfuse_registry_op_schema(self.as_raw(), i, &mut s) })?;
                Ok(read_schema(&s))
            })
            .collect()
    }

    fn prepare(&self, op: &str, attrs: &[(&str, AttrValue)]) -> Result<Prepared> {
        let op_c = c_string(op, "op")?;
        let mut handle: sys::dlfuse_op_t = ptr::null_mut();
        // SAFETY: valid registry, string, out-pointer; the handle belongs to the registry.
        check(unsafe { sys::dlfuse_op_get(self.as_raw(), op_c.as_ptr(), &mut handle) })?;
        let mut raw = empty_schema();
        // SAFETY: a handle of this registry, a struct of our size.
        check(unsafe { sys::dlfuse_op_schema(handle, &mut raw) })?;
        let schema = read_schema(&raw);

        let mut c_attrs = Vec::with_capacity(attrs.len());
        for (name, value) in attrs {
            let a = schema.attrs.iter().find(|a| a.name.eq_ignore_ascii_case(name)).ok_or_else(|| {
                let known: Vec<&str> = schema.attrs.iter().map(|a| a.name.as_str()).collect();
                invalid(format!(
                    "{}: attribute '{}': expected one of {}, got '{}'",
                    schema.name,
                    name,
                    if known.is_empty() { "none (the op takes no attributes)".to_string() } else { known.join(", ") },
                    name
                ))
            })?;
            let (type_, value) = match (a.default, *value) {
                (AttrValue::Float(_), AttrValue::Float(f)) => (sys::DLFUSE_ATTR_FLOAT64, sys::dlfuse_attr_value_t { f64_: f }),
                (AttrValue::Float(_), AttrValue::Int(i)) => (sys::DLFUSE_ATTR_FLOAT64, sys::dlfuse_attr_value_t { f64_: i as f64 }),
                (AttrValue::Int(_), AttrValue::Int(i)) => (sys::DLFUSE_ATTR_INT64, sys::dlfuse_attr_value_t { i64_: i }),
                (AttrValue::Int(_), AttrValue::Float(f)) => {
                    return Err(invalid(format!(
                        "{}: attribute {}: expected an integer (INT64), got the float {:?}",
                        schema.name, a.name, f
                    )))
                }
            };
            c_attrs.push(sys::dlfuse_attr_t { key: a.key, type_, value });
        }
        Ok(Prepared { handle, schema, attrs: c_attrs })
    }

    /// Runs op `op` on `inputs` (in the schema's order, `None` where an optional one is
    /// absent) with `attrs` by name (any case; missing ones take their defaults), on the
    /// host, and returns every output, allocated by the shapes the registry infers. A
    /// reducible output comes back at its widest shape; `call_with` takes other shapes.
    pub fn call<T: Element>(
        &self,
        op: &str,
        inputs: &[Option<&TensorView<'_>>],
        attrs: &[(&str, AttrValue)],
    ) -> Result<Vec<Output<T>>> {
        let p = self.prepare(op, attrs)?;
        let shapes = vec![OutputShape::Inferred; p.schema.outputs.len()];
        let outputs = self.run_host::<T>(&p, inputs, &shapes)?;
        Ok(outputs.into_iter().map(|o| o.expect("every output is computed")).collect())
    }

    /// As `call`, with one `OutputShape` per output (the schema's order) saying how each is
    /// made: at its inferred shape, at a shape given here (a reducible output at its input's
    /// shape), or not at all (`Skip`, an optional output). Returns `None` for those skipped.
    pub fn call_with<T: Element>(
        &self,
        op: &str,
        inputs: &[Option<&TensorView<'_>>],
        attrs: &[(&str, AttrValue)],
        outputs: &[OutputShape<'_>],
    ) -> Result<Vec<Option<Output<T>>>> {
        let p = self.prepare(op, attrs)?;
        if outputs.len() != p.schema.outputs.len() {
            let names: Vec<&str> = p.schema.outputs.iter().map(|o| o.name.as_str()).collect();
            return Err(invalid(format!(
                "{}: outputs: expected {} entries (one per output: {}), got {}",
                p.schema.name,
                names.len(),
                names.join(", "),
                outputs.len()
            )));
        }
        self.run_host::<T>(&p, inputs, outputs)
    }

    /// Runs op `op` into outputs the caller made (the schema's order; `None` where an
    /// optional output is not wanted), on any device the views are on: the generic
    /// `dlfuse_op_call`. The registry checks every output's shape, so a reducible output
    /// may have any shape that broadcasts to its inferred one.
    pub fn call_into(
        &self,
        op: &str,
        inputs: &[Option<&TensorView<'_>>],
        attrs: &[(&str, AttrValue)],
        outputs: &mut [Option<&mut TensorViewMut<'_>>],
    ) -> Result<()> {
        let p = self.prepare(op, attrs)?;
        let dl_in: Vec<Option<sys::DLTensor>> = inputs.iter().map(|t| t.map(|v| v.layout.dl())).collect();
        let mut dl_out: Vec<Option<sys::DLTensor>> = outputs.iter().map(|t| t.as_ref().map(|v| v.layout.dl())).collect();
        op_call(&p, &dl_in, &mut dl_out)
    }

    fn run_host<T: Element>(
        &self,
        p: &Prepared,
        inputs: &[Option<&TensorView<'_>>],
        wanted: &[OutputShape<'_>],
    ) -> Result<Vec<Option<Output<T>>>> {
        let schema = &p.schema;
        let dl_in: Vec<Option<sys::DLTensor>> = inputs.iter().map(|t| t.map(|v| v.layout.dl())).collect();
        let in_ptrs = in_pointers(&dl_in);
        let n_out = schema.outputs.len();
        let mut ndims = vec![0i32; n_out];
        let mut shapes = vec![0i64; n_out * sys::DLFUSE_MAX_NDIM];
        let mut dtypes = vec![sys::DLDataType { code: 0, bits: 0, lanes: 0 }; n_out];
        // SAFETY: the arrays hold what the call writes for n_out outputs; inputs are views.
        check(unsafe {
            sys::dlfuse_op_infer_outputs(
                p.handle,
                in_ptrs.as_ptr(),
                in_ptrs.len() as i32,
                p.attrs.as_ptr(),
                p.attrs.len() as i32,
                n_out as i32,
                ndims.as_mut_ptr(),
                shapes.as_mut_ptr(),
                dtypes.as_mut_ptr(),
            )
        })?;
        let mut outputs: Vec<Option<Output<T>>> = Vec::with_capacity(n_out);
        for i in 0..n_out {
            let dtype = DataType::from_raw(dtypes[i]);
            if dtype != T::DTYPE {
                return Err(invalid(format!(
                    "{}: output '{}': expected dtype {} (the inputs' dtype), got {} (the element type the call asked for)",
                    schema.name, schema.outputs[i].name, dtype, T::DTYPE
                )));
            }
            let shape = match wanted[i] {
                OutputShape::Skip => {
                    outputs.push(None);
                    continue;
                }
                OutputShape::Given(s) => s.to_vec(),
                OutputShape::Inferred => {
                    shapes[i * sys::DLFUSE_MAX_NDIM..i * sys::DLFUSE_MAX_NDIM + ndims[i] as usize].to_vec()
                }
            };
            if let Some(d) = shape.iter().position(|&d| d < 0) {
                return Err(invalid(format!(
                    "{}: output '{}': expected sizes >= 0, got shape {:?} (shape[{}] is {})",
                    schema.name, schema.outputs[i].name, shape, d, shape[d]
                )));
            }
            let numel = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d as usize)).ok_or_else(|| {
                invalid(format!(
                    "{}: output '{}': expected a shape whose element count fits in memory, got {:?}",
                    schema.name, schema.outputs[i].name, shape
                ))
            })?;
            // SAFETY: Element types are plain IEEE floats, for which all-zero bits are 0.0.
            let data = vec![unsafe { std::mem::zeroed::<T>() }; numel.max(1)];
            outputs.push(Some(Output { shape, data }));
        }
        {
            let mut views: Vec<Option<TensorViewMut<'_>>> = Vec::with_capacity(n_out);
            for o in outputs.iter_mut() {
                views.push(match o {
                    Some(o) => Some(TensorViewMut::new(&mut o.data[..], &o.shape)?),
                    None => None,
                });
            }
            let mut dl_out: Vec<Option<sys::DLTensor>> = views.iter().map(|v| v.as_ref().map(|v| v.layout.dl())).collect();
            op_call(p, &dl_in, &mut dl_out)?;
        }
        for o in outputs.iter_mut().flatten() {
            o.data.truncate(o.shape.iter().product::<i64>().max(0) as usize);
        }
        Ok(outputs)
    }
}

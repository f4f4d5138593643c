//! Any op by name (ABI 1.2): its schema is read from the registry, its outputs' shapes are
//! inferred by the registry (`dlfuse_op_infer_outputs`) and allocated on the host, then it
//! runs. No per-op code: the ops a plugin declares are called the same way as the core ops.
use std::ffi::CStr;
use std::os::raw::c_char;
use std::ptr;

use dlfuse_sys as sys;

use crate::error::{check, invalid, Result};
use crate::registry::{c_string, Registry};
use crate::tensor::{Element, TensorView, TensorViewMut};

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
    /// May be absent (`None` as an input); an optional output is still computed by `call`.
    pub optional: bool,
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
            ArgSchema { name: string(a.name), optional: a.flags & sys::DLFUSE_ARG_OPTIONAL != 0 }
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

    /// Runs op `op` on `inputs` (in the schema's order, `None` where an optional one is
    /// absent) with `attrs` by name (any case; missing ones take their defaults), on the
    /// host, and returns every output, allocated by the shapes the registry infers.
    pub fn call<T: Element>(
        &self,
        op: &str,
        inputs: &[Option<&TensorView<'_>>],
        attrs: &[(&str, AttrValue)],
    ) -> Result<Vec<Output<T>>> {
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
                invalid(format!("{}: attribute '{}': expected one of {:?}", schema.name, name, known))
            })?;
            let (type_, value) = match (a.default, *value) {
                (AttrValue::Float(_), AttrValue::Float(f)) => (sys::DLFUSE_ATTR_FLOAT64, sys::dlfuse_attr_value_t { f64_: f }),
                (AttrValue::Float(_), AttrValue::Int(i)) => (sys::DLFUSE_ATTR_FLOAT64, sys::dlfuse_attr_value_t { f64_: i as f64 }),
                (AttrValue::Int(_), AttrValue::Int(i)) => (sys::DLFUSE_ATTR_INT64, sys::dlfuse_attr_value_t { i64_: i }),
                (AttrValue::Int(_), AttrValue::Float(f)) => {
                    return Err(invalid(format!("{}: attribute {}: expected an integer, got {}", schema.name, a.name, f)))
                }
            };
            c_attrs.push(sys::dlfuse_attr_t { key: a.key, type_, value });
        }

        let dl_in: Vec<Option<sys::DLTensor>> = inputs.iter().map(|t| t.map(|v| v.layout.dl())).collect();
        let in_ptrs: Vec<*const sys::DLTensor> =
            dl_in.iter().map(|t| t.as_ref().map_or(ptr::null(), |t| t as *const _)).collect();
        let n_out = schema.outputs.len();
        let mut ndims = vec![0i32; n_out];
        let mut shapes = vec![0i64; n_out * sys::DLFUSE_MAX_NDIM];
        let mut dtypes = vec![sys::DLDataType { code: 0, bits: 0, lanes: 0 }; n_out];
        // SAFETY: the arrays hold what the call writes for n_out outputs; inputs are views.
        check(unsafe {
            sys::dlfuse_op_infer_outputs(
                handle,
                in_ptrs.as_ptr(),
                in_ptrs.len() as i32,
                c_attrs.as_ptr(),
                c_attrs.len() as i32,
                n_out as i32,
                ndims.as_mut_ptr(),
                shapes.as_mut_ptr(),
                dtypes.as_mut_ptr(),
            )
        })?;
        let mut outputs = Vec::with_capacity(n_out);
        for i in 0..n_out {
            if crate::tensor::DataType::from_raw(dtypes[i]) != T::DTYPE {
                return Err(invalid(format!(
                    "{}: output '{}' has dtype {:?}; the call asked for {:?}",
                    schema.name, schema.outputs[i].name, dtypes[i].bits, T::DTYPE
                )));
            }
            let shape = shapes[i * sys::DLFUSE_MAX_NDIM..i * sys::DLFUSE_MAX_NDIM + ndims[i] as usize].to_vec();
            let numel = shape.iter().product::<i64>().max(0) as usize;
            // SAFETY: Element types are plain IEEE floats, for which all-zero bits are 0.0.
            let data = vec![unsafe { std::mem::zeroed::<T>() }; numel.max(1)];
            outputs.push(Output { shape, data });
        }
        {
            let mut views = Vec::with_capacity(n_out);
            for o in outputs.iter_mut() {
                views.push(TensorViewMut::new(&mut o.data[..], &o.shape)?);
            }
            let mut dl_out: Vec<sys::DLTensor> = views.iter().map(|v| v.layout.dl()).collect();
            let out_ptrs: Vec<*mut sys::DLTensor> = dl_out.iter_mut().map(|t| t as *mut _).collect();
            // SAFETY: every DLTensor describes memory borrowed for this call.
            check(unsafe {
                sys::dlfuse_op_call(
                    handle,
                    in_ptrs.as_ptr(),
                    in_ptrs.len() as i32,
                    out_ptrs.as_ptr(),
                    n_out as i32,
                    c_attrs.as_ptr(),
                    c_attrs.len() as i32,
                    ptr::null_mut(),
                )
            })?;
        }
        for o in outputs.iter_mut() {
            o.data.truncate(o.shape.iter().product::<i64>().max(0) as usize);
        }
        Ok(outputs)
    }
}

//! dlfuse/types.h: what the host API and the plugin API share.

pub const DLFUSE_ABI_MAJOR: u32 = 1;
pub const DLFUSE_ABI_MINOR: u32 = 2;

/// `dlfuse_status_t` (a C enum). Kept as an integer: a newer library may return values
/// this crate does not know.
pub type dlfuse_status_t = i32;
pub const DLFUSE_STATUS_OK: dlfuse_status_t = 0;
pub const DLFUSE_STATUS_INVALID_ARGUMENT: dlfuse_status_t = 1;
pub const DLFUSE_STATUS_UNSUPPORTED: dlfuse_status_t = 2;
pub const DLFUSE_STATUS_NOT_FOUND: dlfuse_status_t = 3;
pub const DLFUSE_STATUS_ABI_MISMATCH: dlfuse_status_t = 4;
pub const DLFUSE_STATUS_LOAD_FAILED: dlfuse_status_t = 5;
pub const DLFUSE_STATUS_UNAVAILABLE: dlfuse_status_t = 6;
pub const DLFUSE_STATUS_OUT_OF_MEMORY: dlfuse_status_t = 7;
pub const DLFUSE_STATUS_DEVICE_ERROR: dlfuse_status_t = 8;
pub const DLFUSE_STATUS_INTERNAL: dlfuse_status_t = 9;

pub type dlfuse_activation_t = i32;
pub const DLFUSE_ACT_IDENTITY: dlfuse_activation_t = 0;
pub const DLFUSE_ACT_RELU: dlfuse_activation_t = 1;
pub const DLFUSE_ACT_SIGMOID: dlfuse_activation_t = 2;
pub const DLFUSE_ACT_TANH: dlfuse_activation_t = 3;
pub const DLFUSE_ACT_GELU_ERF: dlfuse_activation_t = 4;
pub const DLFUSE_ACT_GELU_TANH: dlfuse_activation_t = 5;
pub const DLFUSE_ACT_SILU: dlfuse_activation_t = 6;
pub const DLFUSE_ACT_COUNT: i32 = 7;

pub type dlfuse_attr_key_t = i32;
pub const DLFUSE_ATTR_ACTIVATION: dlfuse_attr_key_t = 1;
pub const DLFUSE_ATTR_MULTIPLIER: dlfuse_attr_key_t = 2;
pub const DLFUSE_ATTR_ALLOW_TF32: dlfuse_attr_key_t = 3;
pub const DLFUSE_ATTR_OUTPUT_ACTIVATION: dlfuse_attr_key_t = 4;

pub type dlfuse_attr_type_t = i32;
pub const DLFUSE_ATTR_INT64: dlfuse_attr_type_t = 1;
pub const DLFUSE_ATTR_FLOAT64: dlfuse_attr_type_t = 2;

#[repr(C)]
#[derive(Clone, Copy)]
pub union dlfuse_attr_value_t {
    pub i64_: i64,
    pub f64_: f64,
}

/// The one struct without `struct_size`: its layout is frozen for ABI 1.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct dlfuse_attr_t {
    pub key: i32,
    pub type_: i32,
    pub value: dlfuse_attr_value_t,
}

// Op names, NUL-terminated for passing as `const char*`: DLFUSE_OP_MATMUL_ADD_RELU and one
// constant for each op of dlfuse/ops.def (build.rs derives them), and DLFUSE_CORE_OPS.
include!(concat!(env!("OUT_DIR"), "/op_names.rs"));
pub const DLFUSE_KERNEL_TAKES_V1_1_INPUTS: u32 = 1;

pub type dlfuse_copy_kind_t = i32;
pub const DLFUSE_COPY_HOST_TO_DEVICE: dlfuse_copy_kind_t = 1;
pub const DLFUSE_COPY_DEVICE_TO_HOST: dlfuse_copy_kind_t = 2;
pub const DLFUSE_COPY_DEVICE_TO_DEVICE: dlfuse_copy_kind_t = 3;

// ---- dlfuse/ops.h (ABI 1.2): op schemas. The ops themselves are read at run time
// (dlfuse_registry_op_schema), so this crate lists none of them beyond their names (above).

pub const DLFUSE_MAX_NDIM: usize = 16;
pub const DLFUSE_MAX_ARGS: usize = 16;
pub const DLFUSE_MAX_ATTRS: usize = 8;
pub const DLFUSE_ARG_OPTIONAL: u32 = 1;
pub const DLFUSE_ARG_REDUCIBLE: u32 = 2;
pub const DLFUSE_ATTR_REQUIRED: u32 = 1;

pub type dlfuse_shape_rule_t = i32;
pub const DLFUSE_SHAPE_MATMUL: dlfuse_shape_rule_t = 1;
pub const DLFUSE_SHAPE_BROADCAST: dlfuse_shape_rule_t = 2;
pub const DLFUSE_SHAPE_LIKE: dlfuse_shape_rule_t = 3;
pub const DLFUSE_SHAPE_CALLBACK: dlfuse_shape_rule_t = 4;

/// An input or output of an op's schema (an array element, frozen layout).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct dlfuse_arg_schema_t {
    pub name: *const std::os::raw::c_char,
    pub flags: u32,
    pub since_minor: u32,
    pub shape_rule: i32,
    pub shape_inputs: u32,
    pub alias_input: i32,
}

/// An attribute of an op's schema (an array element, frozen layout).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct dlfuse_attr_schema_t {
    pub name: *const std::os::raw::c_char,
    pub flags: u32,
    pub default_value: dlfuse_attr_t,
    pub min_value: i64,
    pub max_value: i64,
}

pub type dlfuse_shape_fn_t = Option<
    unsafe extern "C" fn(
        inputs: *const *const crate::DLTensor,
        num_inputs: i32,
        attrs: *const dlfuse_attr_t,
        num_attrs: i32,
        output: i32,
        ndim: *mut i32,
        shape: *mut i64,
        err: *mut std::os::raw::c_char,
        err_size: usize,
    ) -> dlfuse_status_t,
>;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct dlfuse_op_schema_t {
    pub struct_size: usize,
    pub name: *const std::os::raw::c_char,
    pub since_minor: u32,
    pub num_inputs: i32,
    pub inputs: *const dlfuse_arg_schema_t,
    pub num_outputs: i32,
    pub outputs: *const dlfuse_arg_schema_t,
    pub num_attrs: i32,
    pub attrs: *const dlfuse_attr_schema_t,
    pub shape_fn: dlfuse_shape_fn_t,
    pub plugin: i32,
}

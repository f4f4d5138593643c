//! dlfuse/dlfuse.h: the host API of libdlfuse (linked with the `link` feature).
use std::ffi::c_void;
use std::os::raw::c_char;

use crate::{
    dlfuse_activation_t, dlfuse_attr_t, dlfuse_copy_kind_t, dlfuse_op_schema_t, dlfuse_status_t, DLDataType,
    DLDevice, DLTensor,
};

/// Opaque: `struct dlfuse_registry`.
#[repr(C)]
pub struct dlfuse_registry {
    _opaque: [u8; 0],
}
/// Opaque: `struct dlfuse_op`.
#[repr(C)]
pub struct dlfuse_op {
    _opaque: [u8; 0],
}
pub type dlfuse_registry_t = *mut dlfuse_registry;
pub type dlfuse_op_t = *mut dlfuse_op;

pub type dlfuse_discovery_flags_t = u32;
pub const DLFUSE_DISCOVER_NONE: u32 = 0;
pub const DLFUSE_DISCOVER_ENV: u32 = 1;
pub const DLFUSE_DISCOVER_INSTALL_DIR: u32 = 2;
pub const DLFUSE_DISCOVER_DEFAULT: u32 = 3;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct dlfuse_registry_options_t {
    pub struct_size: usize,
    pub discovery: u32,
    pub plugin_paths: *const c_char,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct dlfuse_plugin_info_t {
    pub struct_size: usize,
    pub name: *const c_char,
    pub version: *const c_char,
    pub path: *const c_char,
    pub available: i32,
    pub reason: *const c_char,
    pub device_type: i32,
    pub device_count: i32,
    pub abi_major: u32,
    pub abi_minor: u32,
    pub num_kernels: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct dlfuse_kernel_info_t {
    pub struct_size: usize,
    pub op: *const c_char,
    pub device_type: i32,
    pub num_dtypes: i32,
    pub dtypes: *const DLDataType,
    pub priority: i32,
    /// ABI 1.1: the kernel's `DLFUSE_KERNEL_*` bits.
    pub flags: u32,
    /// ABI 1.2: one priority per dtype.
    pub dtype_priorities: *const i32,
}

extern "C" {
    // ABI 1.2: op schemas and output inference.
    pub fn dlfuse_registry_op_count(registry: dlfuse_registry_t, count: *mut i32) -> dlfuse_status_t;
    pub fn dlfuse_registry_op_schema(
        registry: dlfuse_registry_t,
        index: i32,
        schema: *mut dlfuse_op_schema_t,
    ) -> dlfuse_status_t;
    pub fn dlfuse_op_schema(op: dlfuse_op_t, schema: *mut dlfuse_op_schema_t) -> dlfuse_status_t;
    pub fn dlfuse_op_infer_outputs(
        op: dlfuse_op_t,
        inputs: *const *const DLTensor,
        num_inputs: i32,
        attrs: *const dlfuse_attr_t,
        num_attrs: i32,
        num_outputs: i32,
        ndims: *mut i32,
        shapes: *mut i64,
        dtypes: *mut DLDataType,
    ) -> dlfuse_status_t;

    pub fn dlfuse_abi_version(major: *mut u32, minor: *mut u32);
    pub fn dlfuse_last_error() -> *const c_char;
    pub fn dlfuse_status_string(status: dlfuse_status_t) -> *const c_char;

    pub fn dlfuse_registry_create(
        options: *const dlfuse_registry_options_t,
        registry: *mut dlfuse_registry_t,
    ) -> dlfuse_status_t;
    pub fn dlfuse_registry_destroy(registry: dlfuse_registry_t);
    pub fn dlfuse_registry_load(
        registry: dlfuse_registry_t,
        path: *const c_char,
        index: *mut i32,
    ) -> dlfuse_status_t;
    pub fn dlfuse_registry_plugin_count(registry: dlfuse_registry_t, count: *mut i32)
        -> dlfuse_status_t;
    pub fn dlfuse_registry_plugin_info(
        registry: dlfuse_registry_t,
        plugin: i32,
        info: *mut dlfuse_plugin_info_t,
    ) -> dlfuse_status_t;
    pub fn dlfuse_registry_kernel_info(
        registry: dlfuse_registry_t,
        plugin: i32,
        kernel: i32,
        info: *mut dlfuse_kernel_info_t,
    ) -> dlfuse_status_t;
    pub fn dlfuse_registry_prefer(
        registry: dlfuse_registry_t,
        op: *const c_char,
        plugin_name: *const c_char,
    ) -> dlfuse_status_t;

    pub fn dlfuse_op_get(
        registry: dlfuse_registry_t,
        op_name: *const c_char,
        op: *mut dlfuse_op_t,
    ) -> dlfuse_status_t;
    pub fn dlfuse_op_call(
        op: dlfuse_op_t,
        inputs: *const *const DLTensor,
        num_inputs: i32,
        outputs: *const *mut DLTensor,
        num_outputs: i32,
        attrs: *const dlfuse_attr_t,
        num_attrs: i32,
        stream: *mut c_void,
    ) -> dlfuse_status_t;
    pub fn dlfuse_op_resolve(
        op: dlfuse_op_t,
        device_type: i32,
        dtype: DLDataType,
        plugin: *mut i32,
    ) -> dlfuse_status_t;

    pub fn dlfuse_matmul_add_relu(
        registry: dlfuse_registry_t,
        a: *const DLTensor,
        b: *const DLTensor,
        bias: *const DLTensor,
        out: *mut DLTensor,
        allow_tf32: i32,
        stream: *mut c_void,
    ) -> dlfuse_status_t;
    pub fn dlfuse_matmul_add_relu_backward(
        registry: dlfuse_registry_t,
        grad_out: *const DLTensor,
        a: *const DLTensor,
        b: *const DLTensor,
        out: *const DLTensor,
        grad_a: *mut DLTensor,
        grad_b: *mut DLTensor,
        grad_bias: *mut DLTensor,
        allow_tf32: i32,
        stream: *mut c_void,
    ) -> dlfuse_status_t;
    pub fn dlfuse_add_mul_activation(
        registry: dlfuse_registry_t,
        x: *const DLTensor,
        y: *const DLTensor,
        bias: *const DLTensor,
        multiplier: f64,
        activation: dlfuse_activation_t,
        out: *mut DLTensor,
        stream: *mut c_void,
    ) -> dlfuse_status_t;
    pub fn dlfuse_add_mul_activation_backward(
        registry: dlfuse_registry_t,
        grad_out: *const DLTensor,
        x: *const DLTensor,
        y: *const DLTensor,
        bias: *const DLTensor,
        multiplier: f64,
        activation: dlfuse_activation_t,
        grad_x: *mut DLTensor,
        grad_y: *mut DLTensor,
        grad_bias: *mut DLTensor,
        stream: *mut c_void,
    ) -> dlfuse_status_t;

    // ABI 1.1: the matmul epilogue family and the add_mul backward from `out`
    // (dlfuse_abi_version() >= (1, 1); docs/ops.md).
    pub fn dlfuse_matmul_add_activation(
        registry: dlfuse_registry_t,
        a: *const DLTensor,
        b: *const DLTensor,
        bias: *const DLTensor,
        activation: dlfuse_activation_t,
        out: *mut DLTensor,
        pre: *mut DLTensor,
        allow_tf32: i32,
        stream: *mut c_void,
    ) -> dlfuse_status_t;
    pub fn dlfuse_matmul_add_activation_backward(
        registry: dlfuse_registry_t,
        grad_out: *const DLTensor,
        a: *const DLTensor,
        b: *const DLTensor,
        out: *const DLTensor,
        pre: *const DLTensor,
        activation: dlfuse_activation_t,
        grad_a: *mut DLTensor,
        grad_b: *mut DLTensor,
        grad_bias: *mut DLTensor,
        allow_tf32: i32,
        stream: *mut c_void,
    ) -> dlfuse_status_t;
    pub fn dlfuse_matmul_add_residual(
        registry: dlfuse_registry_t,
        a: *const DLTensor,
        b: *const DLTensor,
        bias: *const DLTensor,
        residual: *const DLTensor,
        out: *mut DLTensor,
        allow_tf32: i32,
        stream: *mut c_void,
    ) -> dlfuse_status_t;
    pub fn dlfuse_matmul_add_residual_backward(
        registry: dlfuse_registry_t,
        grad_out: *const DLTensor,
        a: *const DLTensor,
        b: *const DLTensor,
        grad_a: *mut DLTensor,
        grad_b: *mut DLTensor,
        grad_bias: *mut DLTensor,
        grad_residual: *mut DLTensor,
        allow_tf32: i32,
        stream: *mut c_void,
    ) -> dlfuse_status_t;
    pub fn dlfuse_add_mul_activation_backward_from_out(
        registry: dlfuse_registry_t,
        grad_out: *const DLTensor,
        out: *const DLTensor,
        multiplier: f64,
        activation: dlfuse_activation_t,
        grad_x: *mut DLTensor,
        grad_y: *mut DLTensor,
        grad_bias: *mut DLTensor,
        stream: *mut c_void,
    ) -> dlfuse_status_t;

    pub fn dlfuse_device_count(
        registry: dlfuse_registry_t,
        device_type: i32,
        count: *mut i32,
    ) -> dlfuse_status_t;
    pub fn dlfuse_device_alloc(
        registry: dlfuse_registry_t,
        device: DLDevice,
        nbytes: usize,
        ptr: *mut *mut c_void,
    ) -> dlfuse_status_t;
    pub fn dlfuse_device_free(
        registry: dlfuse_registry_t,
        device: DLDevice,
        ptr: *mut c_void,
    ) -> dlfuse_status_t;
    pub fn dlfuse_device_copy(
        registry: dlfuse_registry_t,
        device: DLDevice,
        kind: dlfuse_copy_kind_t,
        dst: *mut c_void,
        dst_offset: usize,
        src: *const c_void,
        src_offset: usize,
        nbytes: usize,
        stream: *mut c_void,
    ) -> dlfuse_status_t;
    pub fn dlfuse_device_synchronize(
        registry: dlfuse_registry_t,
        device: DLDevice,
        stream: *mut c_void,
    ) -> dlfuse_status_t;
}

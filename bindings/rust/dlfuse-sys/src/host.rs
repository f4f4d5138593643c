//! dlfuse/dlfuse.h: the host API of libdlfuse (linked with the `link` feature).
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

// Every function of dlfuse.h, declared by build.rs from the header (see it for each one's
// contract): `dlfuse_registry_create`, `dlfuse_op_call`, `dlfuse_matmul_add_relu`, ...
include!(concat!(env!("OUT_DIR"), "/host_fns.rs"));


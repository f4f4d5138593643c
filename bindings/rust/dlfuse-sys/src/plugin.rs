//! dlfuse/plugin.h: what a plugin exports.
use std::ffi::c_void;
use std::os::raw::c_char;

use crate::{dlfuse_attr_t, dlfuse_copy_kind_t, dlfuse_op_schema_t, dlfuse_status_t, DLDataType, DLTensor};

pub const DLFUSE_PLUGIN_ENTRY: &[u8] = b"dlfuse_plugin_v1\0";

#[repr(C)]
#[derive(Clone, Copy)]
pub struct dlfuse_host_info_t {
    pub struct_size: usize,
    pub abi_major: u32,
    pub abi_minor: u32,
    pub plugin_path: *const c_char,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct dlfuse_kernel_args_t {
    pub struct_size: usize,
    pub op: *const c_char,
    pub inputs: *const *const DLTensor,
    pub num_inputs: i32,
    pub outputs: *const *mut DLTensor,
    pub num_outputs: i32,
    pub attrs: *const dlfuse_attr_t,
    pub num_attrs: i32,
    pub stream: *mut c_void,
    pub err: *mut c_char,
    pub err_size: usize,
}

pub type dlfuse_kernel_fn_t = Option<
    unsafe extern "C" fn(
        state: *mut c_void,
        kernel_data: *mut c_void,
        args: *const dlfuse_kernel_args_t,
    ) -> dlfuse_status_t,
>;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct dlfuse_kernel_t {
    pub struct_size: usize,
    pub op: *const c_char,
    pub device_type: i32,
    pub num_dtypes: i32,
    pub dtypes: *const DLDataType,
    pub priority: i32,
    pub fn_: dlfuse_kernel_fn_t,
    pub kernel_data: *mut c_void,
    /// ABI 1.1: `DLFUSE_KERNEL_*` bits.
    pub flags: u32,
    /// ABI 1.2: the schema of an op the core does not know (NULL: none).
    pub schema: *const dlfuse_op_schema_t,
    /// ABI 1.2: NULL, or one priority per dtype.
    pub dtype_priorities: *const i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct dlfuse_plugin_t {
    pub struct_size: usize,
    pub abi_major: u32,
    pub abi_minor: u32,
    pub name: *const c_char,
    pub version: *const c_char,
    pub device_type: i32,
    pub open: Option<
        unsafe extern "C" fn(
            host: *const dlfuse_host_info_t,
            state: *mut *mut c_void,
            err: *mut c_char,
            err_size: usize,
        ) -> dlfuse_status_t,
    >,
    pub close: Option<unsafe extern "C" fn(state: *mut c_void)>,
    pub get_kernels: Option<
        unsafe extern "C" fn(
            state: *mut c_void,
            kernels: *mut *const dlfuse_kernel_t,
            num_kernels: *mut i32,
            err: *mut c_char,
            err_size: usize,
        ) -> dlfuse_status_t,
    >,
    pub device_count: Option<
        unsafe extern "C" fn(
            state: *mut c_void,
            count: *mut i32,
            err: *mut c_char,
            err_size: usize,
        ) -> dlfuse_status_t,
    >,
    pub alloc: Option<
        unsafe extern "C" fn(
            state: *mut c_void,
            device_id: i32,
            nbytes: usize,
            ptr: *mut *mut c_void,
            err: *mut c_char,
            err_size: usize,
        ) -> dlfuse_status_t,
    >,
    pub free: Option<
        unsafe extern "C" fn(
            state: *mut c_void,
            device_id: i32,
            ptr: *mut c_void,
            err: *mut c_char,
            err_size: usize,
        ) -> dlfuse_status_t,
    >,
    pub copy: Option<
        unsafe extern "C" fn(
            state: *mut c_void,
            device_id: i32,
            kind: dlfuse_copy_kind_t,
            dst: *mut c_void,
            dst_offset: usize,
            src: *const c_void,
            src_offset: usize,
            nbytes: usize,
            stream: *mut c_void,
            err: *mut c_char,
            err_size: usize,
        ) -> dlfuse_status_t,
    >,
    pub synchronize: Option<
        unsafe extern "C" fn(
            state: *mut c_void,
            device_id: i32,
            stream: *mut c_void,
            err: *mut c_char,
            err_size: usize,
        ) -> dlfuse_status_t,
    >,
}

pub type dlfuse_plugin_entry_fn_t = Option<unsafe extern "C" fn() -> *const dlfuse_plugin_t>;

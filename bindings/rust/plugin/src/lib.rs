//! libdlfuse_rust.so: a dlfuse CPU plugin written in Rust. float32, the four ops of ABI 1
//! with broadcasting, strides and byte offsets, computed in float64 and rounded once.
//!
//! Every entry point runs its body under `catch_unwind` (see `guard`), so no panic
//! unwinds into the C host; a panic becomes DLFUSE_STATUS_INTERNAL with its message.
//! The only exported symbol is `dlfuse_plugin_v1`.
#![deny(unsafe_op_in_unsafe_fn)]
mod activation;
mod add_mul;
mod args;
mod guard;
mod matmul;
mod services;
mod strided;


use std::ffi::c_void;
use std::mem::size_of;
use std::os::raw::c_char;
use std::ptr;

use dlfuse_sys::*;

/// Raw pointers are not `Sync`; the descriptor and kernel table are immutable statics
/// read by any thread, which is what the ABI asks for.
#[repr(transparent)]
struct Shared<T>(T);
// SAFETY: the wrapped tables are never written after initialisation.
unsafe impl<T> Sync for Shared<T> {}

const fn cstr(s: &'static [u8]) -> *const c_char {
    s.as_ptr() as *const c_char
}

static DTYPES: [DLDataType; 1] = [DLDataType { code: kDLFloat, bits: 32, lanes: 1 }];

/// Below the first-party plugins (100), above the test plugin (-100).
const PRIORITY: i32 = 0;

type KernelFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *const dlfuse_kernel_args_t) -> dlfuse_status_t;

/// A macro, not a const fn: a const fn may not refer to the DTYPES static.
macro_rules! kernel {
    ($op:expr, $f:expr) => {
        dlfuse_kernel_t {
            struct_size: size_of::<dlfuse_kernel_t>(),
            op: cstr($op),
            device_type: kDLCPU,
            num_dtypes: 1,
            dtypes: &DTYPES as *const DLDataType,
            priority: PRIORITY,
            fn_: Some($f as KernelFn),
            kernel_data: ptr::null_mut(),
            flags: 0,
            schema: ptr::null(),
            dtype_priorities: ptr::null(),
        }
    };
}

static KERNELS: Shared<[dlfuse_kernel_t; 4]> = Shared([
    kernel!(DLFUSE_OP_MATMUL_ADD_RELU, matmul::forward_entry),
    kernel!(DLFUSE_OP_MATMUL_ADD_RELU_BACKWARD, matmul::backward_entry),
    kernel!(DLFUSE_OP_ADD_MUL_ACTIVATION, add_mul::forward_entry),
    kernel!(DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD, add_mul::backward_entry),
]);

/// The name the registry lists; `wrong-grad` builds get another one so both can be
/// loaded side by side.
#[cfg(not(feature = "wrong-grad"))]
const NAME: &[u8] = b"rust\0";
#[cfg(feature = "wrong-grad")]
const NAME: &[u8] = b"rust_wrong_grad\0";

static PLUGIN: Shared<dlfuse_plugin_t> = Shared(dlfuse_plugin_t {
    struct_size: size_of::<dlfuse_plugin_t>(),
    abi_major: DLFUSE_ABI_MAJOR,
    abi_minor: DLFUSE_ABI_MINOR,
    name: cstr(NAME),
    version: cstr(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()),
    device_type: kDLCPU,
    open: Some(services::open),
    close: Some(services::close),
    get_kernels: Some(get_kernels),
    device_count: Some(services::device_count),
    alloc: Some(services::alloc),
    free: Some(services::release),
    copy: Some(services::copy),
    synchronize: Some(services::synchronize),
});

unsafe extern "C" fn get_kernels(
    _state: *mut c_void,
    kernels: *mut *const dlfuse_kernel_t,
    num_kernels: *mut i32,
    err: *mut c_char,
    err_size: usize,
) -> dlfuse_status_t {
    guard::run(err, err_size, || {
        if kernels.is_null() || num_kernels.is_null() {
            return Err(guard::invalid(format!(
                "get_kernels: kernels, num_kernels: expected two pointers to write to, got {:?} and {:?}",
                kernels, num_kernels
            )));
        }
        // SAFETY: both checked non-NULL; the host passes writable pointers.
        unsafe {
            *kernels = KERNELS.0.as_ptr();
            *num_kernels = KERNELS.0.len() as i32;
        }
        Ok(())
    })
}

/// The plugin's one entry symbol. It only returns the address of a static: nothing in
/// it can panic.
#[no_mangle]
pub extern "C" fn dlfuse_plugin_v1() -> *const dlfuse_plugin_t {
    &PLUGIN.0
}

//! open/close and the device services of host memory: one device, 64-byte aligned
//! allocations from the C allocator (free() needs no size, unlike std::alloc), memmove.
use std::ffi::c_void;
use std::os::raw::{c_char, c_int};

use dlfuse_sys::*;

use crate::guard::{self, invalid, Failure};

extern "C" {
    fn posix_memalign(memptr: *mut *mut c_void, alignment: usize, size: usize) -> c_int;
    fn free(ptr: *mut c_void);
}

const ALIGN: usize = 64;

/// open() must hand back a non-NULL state; the plugin keeps none per registry.
static STATE_TOKEN: u8 = 0;

fn check_device(device_id: i32) -> Result<(), Failure> {
    if device_id == 0 {
        Ok(())
    } else {
        Err(invalid(format!("device_id: expected 0 (the only cpu device), got {}", device_id)))
    }
}

pub unsafe extern "C" fn open(
    host: *const dlfuse_host_info_t,
    state: *mut *mut c_void,
    err: *mut c_char,
    err_size: usize,
) -> dlfuse_status_t {
    guard::run(err, err_size, || {
        if state.is_null() {
            return Err(invalid("open: state: expected a pointer to write to, got NULL".to_string()));
        }
        if !host.is_null() {
            // SAFETY: the host's struct_size says how much of it we may read.
            let h = unsafe { &*host };
            let needed = std::mem::size_of::<usize>() + std::mem::size_of::<u32>();
            if h.struct_size >= needed && h.abi_major != DLFUSE_ABI_MAJOR {
                return Err(Failure {
                    status: DLFUSE_STATUS_ABI_MISMATCH,
                    message: format!("open: host abi_major: expected {}, got {}", DLFUSE_ABI_MAJOR, h.abi_major),
                });
            }
        }
        // SAFETY: checked non-NULL.
        unsafe { *state = &STATE_TOKEN as *const u8 as *mut c_void };
        Ok(())
    })
}

pub unsafe extern "C" fn close(_state: *mut c_void) {}

pub unsafe extern "C" fn device_count(
    _state: *mut c_void,
    count: *mut i32,
    err: *mut c_char,
    err_size: usize,
) -> dlfuse_status_t {
    guard::run(err, err_size, || {
        if count.is_null() {
            return Err(invalid("device_count: count: expected a pointer to write to, got NULL".to_string()));
        }
        // SAFETY: checked non-NULL.
        unsafe { *count = 1 };
        Ok(())
    })
}

pub unsafe extern "C" fn alloc(
    _state: *mut c_void,
    device_id: i32,
    nbytes: usize,
    ptr: *mut *mut c_void,
    err: *mut c_char,
    err_size: usize,
) -> dlfuse_status_t {
    guard::run(err, err_size, || {
        if ptr.is_null() {
            return Err(invalid("alloc: ptr: expected a pointer to write to, got NULL".to_string()));
        }
        check_device(device_id)?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // 0 bytes still gets a unique pointer.
        // SAFETY: p is a valid out-pointer; ALIGN is a power of two multiple of sizeof(void*).
        let rc = unsafe { posix_memalign(&mut p, ALIGN, nbytes.max(1)) };
        if rc != 0 || p.is_null() {
            return Err(Failure {
                status: DLFUSE_STATUS_OUT_OF_MEMORY,
                message: format!("alloc: expected {} bytes of host memory, got none (posix_memalign failed)", nbytes),
            });
        }
        // SAFETY: checked non-NULL.
        unsafe { *ptr = p };
        Ok(())
    })
}

pub unsafe extern "C" fn release(
    _state: *mut c_void,
    device_id: i32,
    ptr: *mut c_void,
    err: *mut c_char,
    err_size: usize,
) -> dlfuse_status_t {
    guard::run(err, err_size, || {
        check_device(device_id)?;
        // SAFETY: ptr came from alloc() (posix_memalign) or is NULL, per the ABI.
        unsafe { free(ptr) };
        Ok(())
    })
}

pub unsafe extern "C" fn copy(
    _state: *mut c_void,
    device_id: i32,
    kind: dlfuse_copy_kind_t,
    dst: *mut c_void,
    dst_offset: usize,
    src: *const c_void,
    src_offset: usize,
    nbytes: usize,
    _stream: *mut c_void,
    err: *mut c_char,
    err_size: usize,
) -> dlfuse_status_t {
    guard::run(err, err_size, || {
        check_device(device_id)?;
        if !matches!(kind, DLFUSE_COPY_HOST_TO_DEVICE | DLFUSE_COPY_DEVICE_TO_HOST | DLFUSE_COPY_DEVICE_TO_DEVICE) {
            return Err(invalid(format!("copy kind: expected 1, 2 or 3, got {}", kind)));
        }
        if nbytes == 0 {
            return Ok(());
        }
        if dst.is_null() || src.is_null() {
            return Err(invalid(format!("copy: dst, src: expected two pointers for {} bytes, got {:?} and {:?}", nbytes, dst, src)));
        }
        // SAFETY: the caller vouches for both ranges; memmove semantics, since a
        // device-to-device copy within one buffer may overlap.
        unsafe {
            std::ptr::copy((src as *const u8).add(src_offset), (dst as *mut u8).add(dst_offset), nbytes);
        }
        Ok(())
    })
}

pub unsafe extern "C" fn synchronize(
    _state: *mut c_void,
    device_id: i32,
    _stream: *mut c_void,
    err: *mut c_char,
    err_size: usize,
) -> dlfuse_status_t {
    // Host kernels have finished when they return: nothing to wait for.
    guard::run(err, err_size, || check_device(device_id))
}

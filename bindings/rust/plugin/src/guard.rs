//! The boundary: results of the plugin's Rust code become a status and a message in the
//! host's `err` buffer, and panics are caught before they reach C.
use std::any::Any;
use std::os::raw::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};

use dlfuse_sys::*;

pub struct Failure {
    pub status: dlfuse_status_t,
    pub message: String,
}

pub fn invalid(message: String) -> Failure {
    Failure { status: DLFUSE_STATUS_INVALID_ARGUMENT, message }
}

/// Writes `msg` NUL-terminated, truncated to `err_size` bytes, on a char boundary.
pub fn write_message(err: *mut c_char, err_size: usize, msg: &str) {
    if err.is_null() || err_size == 0 {
        return;
    }
    let mut n = msg.len().min(err_size - 1);
    while !msg.is_char_boundary(n) {
        n -= 1;
    }
    // SAFETY: the host hands a buffer of err_size bytes; n + 1 <= err_size.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr(), err as *mut u8, n);
        *err.add(n) = 0;
    }
}

fn panic_text(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Runs `f`, turning its error or its panic into a status and a message.
pub fn run<F: FnOnce() -> Result<(), Failure>>(err: *mut c_char, err_size: usize, f: F) -> dlfuse_status_t {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => DLFUSE_STATUS_OK,
        Ok(Err(fail)) => {
            write_message(err, err_size, &fail.message);
            fail.status
        }
        Err(payload) => {
            write_message(err, err_size, &format!("rust plugin panicked: {}", panic_text(&*payload)));
            DLFUSE_STATUS_INTERNAL
        }
    }
}

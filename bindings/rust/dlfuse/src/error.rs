//! The error type: a status and the message the registry left in the thread's last error.
use std::ffi::CStr;
use std::fmt;

use dlfuse_sys as sys;

/// `dlfuse_status_t` without OK.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    InvalidArgument,
    Unsupported,
    NotFound,
    AbiMismatch,
    LoadFailed,
    Unavailable,
    OutOfMemory,
    DeviceError,
    Internal,
    /// A status this crate does not know (a newer libdlfuse).
    Other(i32),
}

impl Status {
    pub fn from_raw(raw: sys::dlfuse_status_t) -> Option<Status> {
        Some(match raw {
            sys::DLFUSE_STATUS_OK => return None,
            sys::DLFUSE_STATUS_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::DLFUSE_STATUS_UNSUPPORTED => Status::Unsupported,
            sys::DLFUSE_STATUS_NOT_FOUND => Status::NotFound,
            sys::DLFUSE_STATUS_ABI_MISMATCH => Status::AbiMismatch,
            sys::DLFUSE_STATUS_LOAD_FAILED => Status::LoadFailed,
            sys::DLFUSE_STATUS_UNAVAILABLE => Status::Unavailable,
            sys::DLFUSE_STATUS_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::DLFUSE_STATUS_DEVICE_ERROR => Status::DeviceError,
            sys::DLFUSE_STATUS_INTERNAL => Status::Internal,
            other => Status::Other(other),
        })
    }

    pub fn to_raw(self) -> sys::dlfuse_status_t {
        match self {
            Status::InvalidArgument => sys::DLFUSE_STATUS_INVALID_ARGUMENT,
            Status::Unsupported => sys::DLFUSE_STATUS_UNSUPPORTED,
            Status::NotFound => sys::DLFUSE_STATUS_NOT_FOUND,
            Status::AbiMismatch => sys::DLFUSE_STATUS_ABI_MISMATCH,
            Status::LoadFailed => sys::DLFUSE_STATUS_LOAD_FAILED,
            Status::Unavailable => sys::DLFUSE_STATUS_UNAVAILABLE,
            Status::OutOfMemory => sys::DLFUSE_STATUS_OUT_OF_MEMORY,
            Status::DeviceError => sys::DLFUSE_STATUS_DEVICE_ERROR,
            Status::Internal => sys::DLFUSE_STATUS_INTERNAL,
            Status::Other(v) => v,
        }
    }
}

/// A failed call: the status, and the message naming the argument, the expected and the
/// actual value. From the registry (`dlfuse_last_error`) or, for what this crate checks
/// before calling it (a view reaching past its slice), from this crate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }
    pub fn status(&self) -> Status {
        self.status
    }
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SAFETY: dlfuse_status_string returns a static string for every value.
        let name = unsafe { CStr::from_ptr(sys::dlfuse_status_string(self.status.to_raw())) };
        write!(f, "{}: {}", name.to_string_lossy(), self.message)
    }
}

impl std::error::Error for Error {}

/// Turns a status into a Result. Must run on the thread that made the call, before any
/// other dlfuse call: the last error is per thread and the next failure replaces it.
pub(crate) fn check(raw: sys::dlfuse_status_t) -> Result<()> {
    match Status::from_raw(raw) {
        None => Ok(()),
        Some(status) => {
            // SAFETY: dlfuse_last_error returns a NUL-terminated string valid until the
            // thread's next failing call; it is copied at once.
            let msg = unsafe { CStr::from_ptr(sys::dlfuse_last_error()) };
            Err(Error { status, message: msg.to_string_lossy().into_owned() })
        }
    }
}

pub(crate) fn invalid(message: String) -> Error {
    Error { status: Status::InvalidArgument, message }
}

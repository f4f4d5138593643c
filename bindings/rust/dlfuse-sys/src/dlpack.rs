//! The DLPack structs dlfuse passes (dlpack.h, version >= 1.0). Enums are plain integers:
//! a C enum is an `int`, and a value unknown to Rust must not be undefined behaviour.
use std::ffi::c_void;

/// `DLDeviceType` (a C enum, an `int`).
pub type DLDeviceType = i32;
pub const kDLCPU: DLDeviceType = 1;
pub const kDLCUDA: DLDeviceType = 2;
pub const kDLCUDAHost: DLDeviceType = 3;
pub const kDLOpenCL: DLDeviceType = 4;
pub const kDLVulkan: DLDeviceType = 7;
pub const kDLMetal: DLDeviceType = 8;
pub const kDLROCM: DLDeviceType = 10;
pub const kDLCUDAManaged: DLDeviceType = 13;
pub const kDLOneAPI: DLDeviceType = 14;

/// `DLDataTypeCode` values (stored in `DLDataType::code`, a `uint8_t`).
pub const kDLInt: u8 = 0;
pub const kDLUInt: u8 = 1;
pub const kDLFloat: u8 = 2;
pub const kDLOpaqueHandle: u8 = 3;
pub const kDLBfloat: u8 = 4;
pub const kDLComplex: u8 = 5;
pub const kDLBool: u8 = 6;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DLDevice {
    pub device_type: DLDeviceType,
    pub device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    /// In elements; NULL: compact row-major.
    pub strides: *mut i64,
    pub byte_offset: u64,
}

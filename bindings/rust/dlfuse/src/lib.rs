//! Safe Rust bindings of dlfuse (docs/rust.md): a [`Registry`] of plugins, the four fused
//! ops of ABI 1 on borrowed DLPack views, device memory that frees itself, and errors
//! that carry the registry's status and message.
//!
//! ```no_run
//! use dlfuse::{Registry, TensorView, TensorViewMut};
//! let reg = Registry::new()?;                     // plugins next to libdlfuse, $DLFUSE_PLUGIN_PATH
//! let a = vec![1.0f32; 2 * 3];
//! let b = vec![0.5f32; 3 * 4];
//! let bias = vec![0.0f32; 4];
//! let mut out = vec![0.0f32; 2 * 4];
//! reg.matmul_add_relu(
//!     &TensorView::new(&a, &[2, 3])?,
//!     &TensorView::new(&b, &[3, 4])?,
//!     &TensorView::new(&bias, &[4])?,
//!     &mut TensorViewMut::new(&mut out, &[2, 4])?,
//!     false,
//! )?;
//! assert_eq!(out[0], 1.5);
//! # Ok::<(), dlfuse::Error>(())
//! ```
//!
//! A view borrows its data, so the data cannot be freed or changed while a view of it
//! exists:
//!
//! ```compile_fail
//! use dlfuse::TensorView;
//! let view = {
//!     let data = vec![0.0f32; 4];
//!     TensorView::new(&data, &[4]).unwrap()
//! }; // error: `data` does not live long enough
//! drop(view);
//! ```
//!
//! Device memory cannot outlive its registry, nor a view its buffer:
//!
//! ```compile_fail
//! use dlfuse::{Device, Registry, FLOAT32};
//! let reg = Registry::new().unwrap();
//! let buf = reg.alloc(Device::CPU, 16).unwrap();
//! let view = buf.view(FLOAT32, &[4], None, 0).unwrap();
//! drop(buf); // error: cannot move out of `buf` because it is borrowed
//! drop(view);
//! ```
//!
//! ```compile_fail
//! use dlfuse::{Device, Registry};
//! let reg = Registry::new().unwrap();
//! let buf = reg.alloc(Device::CPU, 16).unwrap();
//! drop(reg); // error: cannot move out of `reg` because it is borrowed
//! drop(buf);
//! ```
//!
//! Nor can data change while a read-only view of it exists:
//!
//! ```compile_fail
//! use dlfuse::TensorView;
//! let mut data = vec![0.0f32; 4];
//! let view = TensorView::new(&data, &[4]).unwrap();
//! data[0] = 1.0; // error: cannot assign to `data[_]` because it is borrowed
//! drop(view);
//! ```
//!
//! The same code with the drops in order compiles (so the failures above are the
//! borrow checker's, not a typo):
//!
//! ```no_run
//! use dlfuse::{Device, Registry, FLOAT32};
//! let reg = Registry::new().unwrap();
//! let buf = reg.alloc(Device::CPU, 16).unwrap();
//! let view = buf.view(FLOAT32, &[4], None, 0).unwrap();
//! drop(view);
//! drop(buf);
//! drop(reg);
//! ```
#![deny(unsafe_op_in_unsafe_fn)]

mod device;
mod error;
mod generic;
mod ops;
mod registry;
mod tensor;

pub use device::DeviceBuffer;
pub use error::{Error, Result, Status};
pub use generic::{ArgSchema, AttrSchema, AttrValue, OpSchema, Output, OutputShape};
pub use ops::Activation;
pub use registry::{Discovery, KernelInfo, PluginInfo, Registry};
pub use tensor::{DataType, Device, Element, TensorView, TensorViewMut, BFLOAT16, FLOAT16, FLOAT32, FLOAT64};

/// The raw declarations, for what the safe API does not cover (streams, the generic call).
pub use dlfuse_sys as sys;

/// The ABI version of the linked libdlfuse (major, minor).
pub fn abi_version() -> (u32, u32) {
    let (mut major, mut minor) = (0u32, 0u32);
    // SAFETY: two valid out-pointers.
    unsafe { sys::dlfuse_abi_version(&mut major, &mut minor) };
    (major, minor)
}

/// The examples of docs/rust.md, run as doc tests so the page cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../../../docs/rust.md")]
pub struct DocsRustMd;

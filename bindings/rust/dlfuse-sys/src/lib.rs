//! Raw declarations of the dlfuse C ABI 1.2 (`abi/include/dlfuse/*.h`) and of the DLPack
//! >= 1.0 structs it uses. Names follow the C headers. The host functions of `dlfuse.h` and
//! the op names of `ops.def` are derived from those headers by `build.rs`; the structs and
//! constants are written here, and `tests/layout.rs` checks them against the C compiler's.
//!
//! The library is linked only with the `link` feature (see `build.rs`), so a plugin can use
//! the types without libdlfuse.
#![allow(non_camel_case_types, non_upper_case_globals)]

mod dlpack;
mod host;
mod plugin;
mod types;

pub use dlpack::*;
pub use host::*;
pub use plugin::*;
pub use types::*;

//! Borrowed DLPack views. A view owns its shape and strides and borrows its data for 'a:
//! the data can be neither freed nor (for a mutable view) touched elsewhere while the
//! view lives, and the `DLTensor` handed to C is built per call from a borrowed view, so
//! its shape pointer cannot dangle. A view never reaches outside the memory it borrows:
//! its extent is checked against the slice or buffer when it is made.
use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;

use dlfuse_sys as sys;

use crate::error::{invalid, Result};

/// A DLPack dtype (`DLDataType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

pub const FLOAT32: DataType = DataType { code: sys::kDLFloat, bits: 32, lanes: 1 };
pub const FLOAT64: DataType = DataType { code: sys::kDLFloat, bits: 64, lanes: 1 };
pub const FLOAT16: DataType = DataType { code: sys::kDLFloat, bits: 16, lanes: 1 };
pub const BFLOAT16: DataType = DataType { code: sys::kDLBfloat, bits: 16, lanes: 1 };

impl DataType {
    pub(crate) fn raw(self) -> sys::DLDataType {
        sys::DLDataType { code: self.code, bits: self.bits, lanes: self.lanes }
    }
    pub(crate) fn from_raw(t: sys::DLDataType) -> DataType {
        DataType { code: t.code, bits: t.bits, lanes: t.lanes }
    }
    /// Bytes per element (at least 1; the registry refuses sub-byte items).
    pub fn item_size(self) -> usize {
        ((self.bits as usize * self.lanes as usize) + 7) / 8
    }
}

/// The dtype's name as the registry's messages spell it: `float32`, `bfloat16`, `int8`,
/// `float16x2` for two lanes.
impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.code {
            sys::kDLInt => write!(f, "int{}", self.bits)?,
            sys::kDLUInt => write!(f, "uint{}", self.bits)?,
            sys::kDLFloat => write!(f, "float{}", self.bits)?,
            sys::kDLBfloat => write!(f, "bfloat{}", self.bits)?,
            sys::kDLBool => write!(f, "bool{}", self.bits)?,
            sys::kDLComplex => write!(f, "complex{}", self.bits)?,
            code => write!(f, "code{}_{}", code, self.bits)?,
        }
        if self.lanes != 1 {
            write!(f, "x{}", self.lanes)?;
        }
        Ok(())
    }
}

/// A DLPack device (`DLDevice`): a `DLDeviceType` and an index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Device {
    pub device_type: i32,
    pub device_id: i32,
}

impl Device {
    pub const CPU: Device = Device { device_type: sys::kDLCPU, device_id: 0 };
    pub fn cuda(id: i32) -> Device {
        Device { device_type: sys::kDLCUDA, device_id: id }
    }
    pub fn opencl(id: i32) -> Device {
        Device { device_type: sys::kDLOpenCL, device_id: id }
    }
    pub(crate) fn raw(self) -> sys::DLDevice {
        sys::DLDevice { device_type: self.device_type, device_id: self.device_id }
    }
}

/// Element types a host slice may hold.
///
/// # Safety
/// `DTYPE` must describe `Self` exactly (size and meaning).
pub unsafe trait Element: Copy + Send + Sync + 'static {
    const DTYPE: DataType;
}
// SAFETY: IEEE binary32 / binary64.
unsafe impl Element for f32 {
    const DTYPE: DataType = FLOAT32;
}
unsafe impl Element for f64 {
    const DTYPE: DataType = FLOAT64;
}

fn extent_overflow(shape: &[i64], strides: Option<&[i64]>) -> crate::Error {
    invalid(format!(
        "strides: expected an extent that fits in 128 bits, got shape {:?} with strides {:?}, whose extent overflows",
        shape, strides
    ))
}

/// What both view kinds hold.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    pub data: *mut c_void,
    pub device: Device,
    pub dtype: DataType,
    pub shape: Vec<i64>,
    pub strides: Option<Vec<i64>>,
    pub byte_offset: u64,
}

impl Layout {
    /// Checks that every element the view addresses lies in `[0, len_bytes)`.
    pub fn new(
        data: *mut c_void,
        len_bytes: usize,
        device: Device,
        dtype: DataType,
        shape: &[i64],
        strides: Option<&[i64]>,
        byte_offset: u64,
    ) -> Result<Layout> {
        if let Some(s) = strides {
            if s.len() != shape.len() {
                return Err(invalid(format!(
                    "strides: expected {} entries (one per dim of shape {:?}), got {}",
                    shape.len(),
                    shape,
                    s.len()
                )));
            }
        }
        if shape.len() > i32::MAX as usize {
            return Err(invalid(format!("shape: expected at most {} dims, got {}", i32::MAX, shape.len())));
        }
        let empty = shape.iter().any(|&d| d == 0);
        if !empty {
            // Element offsets span [lo, hi], in i128 so that no i64 shape or stride overflows.
            let (mut lo, mut hi) = (0i128, 0i128);
            let mut compact = 1i128;
            for d in (0..shape.len()).rev() {
                let size = shape[d] as i128;
                if size < 0 {
                    // Not addressable: the registry refuses it with its own message.
                    break;
                }
                let stride = strides.map_or(compact, |s| s[d] as i128);
                // Checked: products and sums of many i64 can pass even i128.
                let reach = match (size - 1).checked_mul(stride) {
                    Some(r) => r,
                    None => return Err(extent_overflow(shape, strides)),
                };
                let sum = if reach < 0 { lo.checked_add(reach) } else { hi.checked_add(reach) };
                match sum {
                    Some(v) if reach < 0 => lo = v,
                    Some(v) => hi = v,
                    None => return Err(extent_overflow(shape, strides)),
                }
                compact = match compact.checked_mul(size) {
                    Some(c) => c,
                    None => {
                        return Err(invalid(format!(
                            "shape: expected an element count that fits in 128 bits, got {:?}, whose count overflows",
                            shape
                        )))
                    }
                };
            }
            let item = dtype.item_size() as i128;
            let first = byte_offset as i128 + lo * item;
            let end = byte_offset as i128 + (hi + 1) * item;
            if first < 0 || end > len_bytes as i128 {
                return Err(invalid(format!(
                    "view extent: expected bytes within [0, {}) of the borrowed memory, got [{}, {}) \
                     (shape {:?}, strides {:?}, byte_offset {})",
                    len_bytes, first, end, shape, strides, byte_offset
                )));
            }
        }
        Ok(Layout {
            data,
            device,
            dtype,
            shape: shape.to_vec(),
            strides: strides.map(|s| s.to_vec()),
            byte_offset,
        })
    }

    /// The C view of this layout; valid while `self` is borrowed and unmoved.
    pub fn dl(&self) -> sys::DLTensor {
        sys::DLTensor {
            data: self.data,
            device: self.device.raw(),
            ndim: self.shape.len() as i32,
            dtype: self.dtype.raw(),
            shape: self.shape.as_ptr() as *mut i64,
            strides: self.strides.as_ref().map_or(std::ptr::null_mut(), |s| s.as_ptr() as *mut i64),
            byte_offset: self.byte_offset,
        }
    }
}

/// A read-only view: an input of an op.
#[derive(Clone, Debug)]
pub struct TensorView<'a> {
    pub(crate) layout: Layout,
    _data: PhantomData<&'a [u8]>,
}

/// A writable view: an output of an op. Borrowing its data mutably, it is the only way
/// to that memory while it lives, so outputs cannot alias inputs or one another.
#[derive(Debug)]
pub struct TensorViewMut<'a> {
    pub(crate) layout: Layout,
    _data: PhantomData<&'a mut [u8]>,
}

// SAFETY: a TensorView is a shared borrow of plain data (as &[T]), a TensorViewMut an
// exclusive one (as &mut [T]); the raw pointer inside is only what the borrow allows.
unsafe impl Send for TensorView<'_> {}
unsafe impl Sync for TensorView<'_> {}
unsafe impl Send for TensorViewMut<'_> {}
unsafe impl Sync for TensorViewMut<'_> {}

// What both views read of their layout.
macro_rules! layout_accessors {
    () => {
        pub fn shape(&self) -> &[i64] {
            &self.layout.shape
        }
        pub fn dtype(&self) -> DataType {
            self.layout.dtype
        }
        pub fn device(&self) -> Device {
            self.layout.device
        }
        /// The C view, for calls the safe API does not wrap. Its pointers are valid only
        /// while this view is alive and unmoved; using it is `unsafe` on the C side.
        pub fn raw(&self) -> sys::DLTensor {
            self.layout.dl()
        }
    };
}

impl<'a> TensorView<'a> {
    /// A compact row-major view of a host slice.
    pub fn new<T: Element>(data: &'a [T], shape: &[i64]) -> Result<Self> {
        Self::strided(data, shape, None, 0)
    }

    /// A host view with strides in elements (`None`: compact) and a byte offset.
    pub fn strided<T: Element>(data: &'a [T], shape: &[i64], strides: Option<&[i64]>, byte_offset: u64) -> Result<Self> {
        let layout = Layout::new(
            data.as_ptr() as *mut c_void,
            std::mem::size_of_val(data),
            Device::CPU,
            T::DTYPE,
            shape,
            strides,
            byte_offset,
        )?;
        Ok(TensorView { layout, _data: PhantomData })
    }

    /// A view of memory this crate cannot see (a framework's tensor, another device).
    ///
    /// # Safety
    /// `data` + `byte_offset` must address, for all of 'a, every element of the view on
    /// `device`, and nothing may write that memory while the view or a call using it lives.
    pub unsafe fn from_raw_parts(
        data: *mut c_void,
        device: Device,
        dtype: DataType,
        shape: &[i64],
        strides: Option<&[i64]>,
        byte_offset: u64,
    ) -> Result<Self> {
        let layout = Layout::new(data, usize::MAX, device, dtype, shape, strides, byte_offset)?;
        Ok(TensorView { layout, _data: PhantomData })
    }

    pub(crate) fn from_layout(layout: Layout) -> Self {
        TensorView { layout, _data: PhantomData }
    }

    layout_accessors!();
}

impl<'a> TensorViewMut<'a> {
    pub fn new<T: Element>(data: &'a mut [T], shape: &[i64]) -> Result<Self> {
        Self::strided(data, shape, None, 0)
    }

    pub fn strided<T: Element>(
        data: &'a mut [T],
        shape: &[i64],
        strides: Option<&[i64]>,
        byte_offset: u64,
    ) -> Result<Self> {
        let layout = Layout::new(
            data.as_mut_ptr() as *mut c_void,
            std::mem::size_of_val(data),
            Device::CPU,
            T::DTYPE,
            shape,
            strides,
            byte_offset,
        )?;
        Ok(TensorViewMut { layout, _data: PhantomData })
    }

    /// # Safety
    /// As `TensorView::from_raw_parts`, and nothing else may read or write the memory
    /// while the view or a call using it lives.
    pub unsafe fn from_raw_parts(
        data: *mut c_void,
        device: Device,
        dtype: DataType,
        shape: &[i64],
        strides: Option<&[i64]>,
        byte_offset: u64,
    ) -> Result<Self> {
        let layout = Layout::new(data, usize::MAX, device, dtype, shape, strides, byte_offset)?;
        Ok(TensorViewMut { layout, _data: PhantomData })
    }

    pub(crate) fn from_layout(layout: Layout) -> Self {
        TensorViewMut { layout, _data: PhantomData }
    }

    layout_accessors!();
}

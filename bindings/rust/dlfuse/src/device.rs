//! Device memory through the registry's device services, freed on drop.
use std::ffi::c_void;
use std::ptr;

use dlfuse_sys as sys;

use crate::error::{check, invalid, Result};
use crate::registry::Registry;
use crate::tensor::{DataType, Device, Element, Layout, TensorView, TensorViewMut};

/// `nbytes` of memory on one device, from `dlfuse_device_alloc`. It borrows its registry
/// (which cannot be destroyed first) and is freed with `dlfuse_device_free` on drop,
/// after waiting for the device's default stream, so a kernel still running on it never
/// sees it freed. Views of it borrow it, so it cannot be freed while one exists.
pub struct DeviceBuffer<'r> {
    reg: &'r Registry,
    device: Device,
    ptr: *mut c_void,
    nbytes: usize,
}

// SAFETY: device services are thread-safe (docs/abi.md); the buffer is freed only by
// its owner's drop, and &self methods only read it (or copy out of it).
unsafe impl Send for DeviceBuffer<'_> {}
unsafe impl Sync for DeviceBuffer<'_> {}

impl Registry {
    /// Allocates `nbytes` on `device` with the first available plugin for its type.
    pub fn alloc(&self, device: Device, nbytes: usize) -> Result<DeviceBuffer<'_>> {
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: valid registry and out-pointer.
        check(unsafe { sys::dlfuse_device_alloc(self.as_raw(), device.raw(), nbytes, &mut p) })?;
        Ok(DeviceBuffer { reg: self, device, ptr: p, nbytes })
    }
}

fn range_check(offset: usize, len: usize, nbytes: usize, what: &str) -> Result<()> {
    if offset.checked_add(len).map_or(true, |end| end > nbytes) {
        return Err(invalid(format!(
            "{}: expected a byte range within the buffer's {} bytes, got offset {} + {} bytes",
            what, nbytes, offset, len
        )));
    }
    Ok(())
}

impl<'r> DeviceBuffer<'r> {
    pub fn len(&self) -> usize {
        self.nbytes
    }
    pub fn is_empty(&self) -> bool {
        self.nbytes == 0
    }
    pub fn device(&self) -> Device {
        self.device
    }
    /// What `DLTensor.data` takes (a device pointer, or a `cl_mem` on OpenCL).
    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr
    }

    /// Copies `src` to the buffer at `offset` bytes; `src` is done with on return.
    pub fn copy_from_host<T: Element>(&mut self, offset: usize, src: &[T]) -> Result<()> {
        let n = std::mem::size_of_val(src);
        range_check(offset, n, self.nbytes, "copy_from_host")?;
        // SAFETY: both ranges checked; the buffer is exclusively borrowed.
        check(unsafe {
            sys::dlfuse_device_copy(
                self.reg.as_raw(),
                self.device.raw(),
                sys::DLFUSE_COPY_HOST_TO_DEVICE,
                self.ptr,
                offset,
                src.as_ptr() as *const c_void,
                0,
                n,
                ptr::null_mut(),
            )
        })
    }

    /// Copies from the buffer at `offset` bytes into `dst`, after the work queued before
    /// it on the device's default stream; complete on return.
    pub fn copy_to_host<T: Element>(&self, offset: usize, dst: &mut [T]) -> Result<()> {
        let n = std::mem::size_of_val(dst);
        range_check(offset, n, self.nbytes, "copy_to_host")?;
        // SAFETY: both ranges checked; any bit pattern is a valid f32/f64.
        check(unsafe {
            sys::dlfuse_device_copy(
                self.reg.as_raw(),
                self.device.raw(),
                sys::DLFUSE_COPY_DEVICE_TO_HOST,
                dst.as_mut_ptr() as *mut c_void,
                0,
                self.ptr,
                offset,
                n,
                ptr::null_mut(),
            )
        })
    }

    /// Waits for the device's default stream.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: valid registry.
        check(unsafe { sys::dlfuse_device_synchronize(self.reg.as_raw(), self.device.raw(), ptr::null_mut()) })
    }

    /// A read-only view of the buffer (strides in elements, `None`: compact).
    pub fn view(&self, dtype: DataType, shape: &[i64], strides: Option<&[i64]>, byte_offset: u64) -> Result<TensorView<'_>> {
        let l = Layout::new(self.ptr, self.nbytes, self.device, dtype, shape, strides, byte_offset)?;
        Ok(TensorView::from_layout(l))
    }

    /// A writable view; it borrows the buffer exclusively.
    pub fn view_mut(
        &mut self,
        dtype: DataType,
        shape: &[i64],
        strides: Option<&[i64]>,
        byte_offset: u64,
    ) -> Result<TensorViewMut<'_>> {
        let l = Layout::new(self.ptr, self.nbytes, self.device, dtype, shape, strides, byte_offset)?;
        Ok(TensorViewMut::from_layout(l))
    }
}

impl Drop for DeviceBuffer<'_> {
    fn drop(&mut self) {
        // Errors cannot be reported from drop; a failed free leaks, nothing worse.
        // SAFETY: ptr came from this registry's alloc on this device and is freed once.
        unsafe {
            sys::dlfuse_device_synchronize(self.reg.as_raw(), self.device.raw(), ptr::null_mut());
            sys::dlfuse_device_free(self.reg.as_raw(), self.device.raw(), self.ptr);
        }
    }
}

//! The registry: plugins found, loaded and listed; dispatch preferences.
use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr::{self, NonNull};

use dlfuse_sys as sys;

use crate::error::{check, invalid, Result};
use crate::tensor::DataType;

/// Where `Registry::with_options` looks for plugins (`dlfuse_discovery_flags_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Discovery(u32);

impl Discovery {
    /// Only the paths given.
    pub const NONE: Discovery = Discovery(sys::DLFUSE_DISCOVER_NONE);
    /// Folders and files in `$DLFUSE_PLUGIN_PATH`.
    pub const ENV: Discovery = Discovery(sys::DLFUSE_DISCOVER_ENV);
    /// `<folder of libdlfuse.so>/dlfuse/plugins`.
    pub const INSTALL_DIR: Discovery = Discovery(sys::DLFUSE_DISCOVER_INSTALL_DIR);
    pub const DEFAULT: Discovery = Discovery(sys::DLFUSE_DISCOVER_DEFAULT);
}

impl std::ops::BitOr for Discovery {
    type Output = Discovery;
    fn bitor(self, o: Discovery) -> Discovery {
        Discovery(self.0 | o.0)
    }
}

/// A set of loaded plugins (`dlfuse_registry_t`), destroyed on drop.
///
/// `Send + Sync`: every libdlfuse function is thread-safe (docs/abi.md, "Threads"), and
/// the one rule, that `dlfuse_registry_destroy` must not race with calls, is the borrow
/// checker's: `Drop` needs the registry by value, so no call, view of its memory or
/// `DeviceBuffer` can still be alive.
pub struct Registry {
    raw: NonNull<sys::dlfuse_registry>,
}

// SAFETY: see the type's documentation.
unsafe impl Send for Registry {}
unsafe impl Sync for Registry {}

/// A kernel a plugin declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelInfo {
    pub op: String,
    pub device_type: i32,
    pub dtypes: Vec<DataType>,
    pub priority: i32,
}

/// A plugin the registry tried to load, available or not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginInfo {
    pub index: usize,
    pub name: String,
    pub version: String,
    pub path: PathBuf,
    pub available: bool,
    /// Why it is not available; empty if it is.
    pub reason: String,
    pub device_type: i32,
    pub device_count: i32,
    pub abi_major: u32,
    pub abi_minor: u32,
    pub kernels: Vec<KernelInfo>,
}

/// Copies a registry-owned string (NULL reads as "").
fn string(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the registry's strings are NUL-terminated and live as long as it does.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

pub(crate) fn c_string(s: &str, what: &str) -> Result<CString> {
    CString::new(s).map_err(|_| invalid(format!("{}: expected no NUL byte, got {:?}", what, s)))
}

fn path_string(p: &Path, what: &str) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| invalid(format!("{}: expected no NUL byte, got {:?}", what, p)))
}

impl Registry {
    /// Default discovery: `$DLFUSE_PLUGIN_PATH`, then the plugin folder next to libdlfuse.
    pub fn new() -> Result<Registry> {
        Self::create(None)
    }

    /// `plugin_paths` (files or folders) are loaded first, then what `discovery` finds.
    /// A plugin that fails to load never fails creation: it is listed, unavailable.
    pub fn with_options<P: AsRef<Path>>(discovery: Discovery, plugin_paths: &[P]) -> Result<Registry> {
        let mut joined = Vec::new();
        for (i, p) in plugin_paths.iter().enumerate() {
            let bytes = p.as_ref().as_os_str().as_bytes();
            if bytes.contains(&b':') {
                return Err(invalid(format!(
                    "plugin_paths[{}]: expected a path without ':' (the list separator), got {:?}",
                    i,
                    p.as_ref()
                )));
            }
            if bytes.contains(&0) {
                return Err(invalid(format!(
                    "plugin_paths[{}]: expected a path without a NUL byte, got {:?}",
                    i,
                    p.as_ref()
                )));
            }
            if i > 0 {
                joined.push(b':');
            }
            joined.extend_from_slice(bytes);
        }
        let paths = CString::new(joined).expect("no entry holds a NUL byte");
        let options = sys::dlfuse_registry_options_t {
            struct_size: std::mem::size_of::<sys::dlfuse_registry_options_t>(),
            discovery: discovery.0,
            plugin_paths: if plugin_paths.is_empty() { ptr::null() } else { paths.as_ptr() },
        };
        Self::create(Some(&options))
    }

    fn create(options: Option<&sys::dlfuse_registry_options_t>) -> Result<Registry> {
        let mut raw: sys::dlfuse_registry_t = ptr::null_mut();
        // SAFETY: options is NULL or a valid struct; raw is a valid out-pointer.
        check(unsafe { sys::dlfuse_registry_create(options.map_or(ptr::null(), |o| o as *const _), &mut raw) })?;
        NonNull::new(raw)
            .map(|raw| Registry { raw })
            .ok_or_else(|| {
                crate::Error::new(
                    crate::Status::Internal,
                    "dlfuse_registry_create: registry: expected a handle with status OK, got NULL",
                )
            })
    }

    pub fn as_raw(&self) -> sys::dlfuse_registry_t {
        self.raw.as_ptr()
    }

    /// Loads one plugin file; returns its index. A failure leaves it listed as unavailable.
    pub fn load(&self, path: impl AsRef<Path>) -> Result<usize> {
        let c = path_string(path.as_ref(), "path")?;
        let mut index = -1i32;
        // SAFETY: valid registry, string and out-pointer.
        check(unsafe { sys::dlfuse_registry_load(self.as_raw(), c.as_ptr(), &mut index) })?;
        Ok(index as usize)
    }

    /// Every plugin tried, in load order, with its kernels.
    pub fn plugins(&self) -> Result<Vec<PluginInfo>> {
        let mut count = 0i32;
        // SAFETY: valid registry and out-pointer.
        check(unsafe { sys::dlfuse_registry_plugin_count(self.as_raw(), &mut count) })?;
        (0..count).map(|i| self.plugin(i as usize)).collect()
    }

    pub fn plugin(&self, index: usize) -> Result<PluginInfo> {
        // SAFETY: all-zero is a valid dlfuse_plugin_info_t (NULL pointers, zeros).
        let mut info: sys::dlfuse_plugin_info_t = unsafe { std::mem::zeroed() };
        info.struct_size = std::mem::size_of::<sys::dlfuse_plugin_info_t>();
        // SAFETY: valid registry and struct.
        check(unsafe { sys::dlfuse_registry_plugin_info(self.as_raw(), index as i32, &mut info) })?;
        let mut kernels = Vec::with_capacity(info.num_kernels.max(0) as usize);
        for k in 0..info.num_kernels {
            // SAFETY: as above.
            let mut ki: sys::dlfuse_kernel_info_t = unsafe { std::mem::zeroed() };
            ki.struct_size = std::mem::size_of::<sys::dlfuse_kernel_info_t>();
            // SAFETY: valid registry and struct.
            check(unsafe { sys::dlfuse_registry_kernel_info(self.as_raw(), index as i32, k, &mut ki) })?;
            let dtypes = if ki.num_dtypes > 0 && !ki.dtypes.is_null() {
                // SAFETY: num_dtypes entries, alive as long as the registry.
                unsafe { std::slice::from_raw_parts(ki.dtypes, ki.num_dtypes as usize) }
                    .iter()
                    .map(|&d| DataType::from_raw(d))
                    .collect()
            } else {
                Vec::new()
            };
            kernels.push(KernelInfo { op: string(ki.op), device_type: ki.device_type, dtypes, priority: ki.priority });
        }
        Ok(PluginInfo {
            index,
            name: string(info.name),
            version: string(info.version),
            path: PathBuf::from(string(info.path)),
            available: info.available != 0,
            reason: string(info.reason),
            device_type: info.device_type,
            device_count: info.device_count,
            abi_major: info.abi_major,
            abi_minor: info.abi_minor,
            kernels,
        })
    }

    /// Puts `plugin` first in the dispatch order of `op` (`None`: every op); the latest
    /// preference wins. `plugin = None` clears the preferences of `op`.
    pub fn prefer(&self, op: Option<&str>, plugin: Option<&str>) -> Result<()> {
        let op_c = op.map(|o| c_string(o, "op")).transpose()?;
        let plugin_c = plugin.map(|p| c_string(p, "plugin_name")).transpose()?;
        // SAFETY: valid registry; NULL or valid strings.
        check(unsafe {
            sys::dlfuse_registry_prefer(
                self.as_raw(),
                op_c.as_ref().map_or(ptr::null(), |c| c.as_ptr()),
                plugin_c.as_ref().map_or(ptr::null(), |c| c.as_ptr()),
            )
        })
    }

    /// The index of the plugin a call of `op` on (device type, dtype) would run.
    pub fn resolve(&self, op: &str, device_type: i32, dtype: DataType) -> Result<usize> {
        let op_c = c_string(op, "op")?;
        let mut handle: sys::dlfuse_op_t = ptr::null_mut();
        // SAFETY: valid registry, string, out-pointer; the handle belongs to the registry.
        check(unsafe { sys::dlfuse_op_get(self.as_raw(), op_c.as_ptr(), &mut handle) })?;
        let mut plugin = -1i32;
        // SAFETY: a handle just returned by this registry.
        check(unsafe { sys::dlfuse_op_resolve(handle, device_type, dtype.raw(), &mut plugin) })?;
        Ok(plugin as usize)
    }

    /// Devices of `device_type` served by the registry's plugins.
    pub fn device_count(&self, device_type: i32) -> Result<i32> {
        let mut count = 0i32;
        // SAFETY: valid registry and out-pointer.
        check(unsafe { sys::dlfuse_device_count(self.as_raw(), device_type, &mut count) })?;
        Ok(count)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        // SAFETY: by-value drop: no borrow of the registry (calls, buffers) is alive.
        unsafe { sys::dlfuse_registry_destroy(self.raw.as_ptr()) }
    }
}

//! The hand-written declarations against the C compiler: every struct's size and every
//! field's offset and size, and every constant, as `cc` sees them through the real headers.
//! Headers: $DLFUSE_INCLUDE_DIR (default: this tree's abi/include) and $DLPACK_INCLUDE_DIR
//! (default: asked from the apache-tvm-ffi wheel, as cmake/DlfuseDLPack.cmake does).
//! The compiler is $CC, default `cc`.
use std::collections::BTreeMap;
use std::mem::{size_of, MaybeUninit};
use std::path::PathBuf;
use std::process::Command;

use dlfuse_sys::*;

struct Item {
    name: String,
    c_expr: String,
    rust: u64,
}

/// Offset of a field without creating a reference to uninitialised memory.
macro_rules! offset {
    ($t:ty, $f:ident) => {{
        let u = MaybeUninit::<$t>::uninit();
        let base = u.as_ptr();
        // SAFETY: addr_of! computes the address only; nothing is read.
        let field = unsafe { std::ptr::addr_of!((*base).$f) };
        field as usize - base as usize
    }};
}

macro_rules! field_size {
    ($t:ty, $f:ident) => {{
        fn size_of_pointee<T>(_: *const T) -> usize {
            size_of::<T>()
        }
        let u = MaybeUninit::<$t>::uninit();
        let base = u.as_ptr();
        // SAFETY: as in offset!.
        size_of_pointee(unsafe { std::ptr::addr_of!((*base).$f) })
    }};
}

/// `layout!(items, CType, RustType; c_field => rust_field, ...)`
macro_rules! layout {
    ($v:ident, $c:literal, $t:ty; $($cf:literal => $rf:ident),* $(,)?) => {
        $v.push(Item { name: format!("sizeof({})", $c), c_expr: format!("sizeof({})", $c),
                       rust: size_of::<$t>() as u64 });
        $(
            $v.push(Item { name: format!("offsetof({}, {})", $c, $cf),
                           c_expr: format!("offsetof({}, {})", $c, $cf),
                           rust: offset!($t, $rf) as u64 });
            $v.push(Item { name: format!("sizeof({}.{})", $c, $cf),
                           c_expr: format!("sizeof((({}*)0)->{})", $c, $cf),
                           rust: field_size!($t, $rf) as u64 });
        )*
    };
}

macro_rules! constants {
    ($v:ident; $($name:ident),* $(,)?) => {
        $( $v.push(Item { name: stringify!($name).to_string(),
                          c_expr: format!("(unsigned long long)({})", stringify!($name)),
                          rust: $name as u64 }); )*
    };
}

fn items() -> Vec<Item> {
    let mut v = Vec::new();
    layout!(v, "DLDevice", DLDevice; "device_type" => device_type, "device_id" => device_id);
    layout!(v, "DLDataType", DLDataType; "code" => code, "bits" => bits, "lanes" => lanes);
    layout!(v, "DLTensor", DLTensor; "data" => data, "device" => device, "ndim" => ndim,
            "dtype" => dtype, "shape" => shape, "strides" => strides, "byte_offset" => byte_offset);
    layout!(v, "dlfuse_attr_t", dlfuse_attr_t; "key" => key, "type" => type_, "value" => value);
    layout!(v, "dlfuse_host_info_t", dlfuse_host_info_t; "struct_size" => struct_size,
            "abi_major" => abi_major, "abi_minor" => abi_minor, "plugin_path" => plugin_path);
    layout!(v, "dlfuse_kernel_args_t", dlfuse_kernel_args_t; "struct_size" => struct_size,
            "op" => op, "inputs" => inputs, "num_inputs" => num_inputs, "outputs" => outputs,
            "num_outputs" => num_outputs, "attrs" => attrs, "num_attrs" => num_attrs,
            "stream" => stream, "err" => err, "err_size" => err_size);
    layout!(v, "dlfuse_kernel_t", dlfuse_kernel_t; "struct_size" => struct_size, "op" => op,
            "device_type" => device_type, "num_dtypes" => num_dtypes, "dtypes" => dtypes,
            "priority" => priority, "fn" => fn_, "kernel_data" => kernel_data, "flags" => flags,
            "schema" => schema, "dtype_priorities" => dtype_priorities);
    layout!(v, "dlfuse_plugin_t", dlfuse_plugin_t; "struct_size" => struct_size,
            "abi_major" => abi_major, "abi_minor" => abi_minor, "name" => name,
            "version" => version, "device_type" => device_type, "open" => open,
            "close" => close, "get_kernels" => get_kernels, "device_count" => device_count,
            "alloc" => alloc, "free" => free, "copy" => copy, "synchronize" => synchronize);
    layout!(v, "dlfuse_registry_options_t", dlfuse_registry_options_t;
            "struct_size" => struct_size, "discovery" => discovery, "plugin_paths" => plugin_paths);
    layout!(v, "dlfuse_plugin_info_t", dlfuse_plugin_info_t; "struct_size" => struct_size,
            "name" => name, "version" => version, "path" => path, "available" => available,
            "reason" => reason, "device_type" => device_type, "device_count" => device_count,
            "abi_major" => abi_major, "abi_minor" => abi_minor, "num_kernels" => num_kernels);
    layout!(v, "dlfuse_kernel_info_t", dlfuse_kernel_info_t; "struct_size" => struct_size,
            "op" => op, "device_type" => device_type, "num_dtypes" => num_dtypes,
            "dtypes" => dtypes, "priority" => priority, "flags" => flags,
            "dtype_priorities" => dtype_priorities);
    layout!(v, "dlfuse_arg_schema_t", dlfuse_arg_schema_t; "name" => name, "flags" => flags,
            "since_minor" => since_minor, "shape_rule" => shape_rule, "shape_inputs" => shape_inputs,
            "alias_input" => alias_input);
    layout!(v, "dlfuse_attr_schema_t", dlfuse_attr_schema_t; "name" => name, "flags" => flags,
            "default_value" => default_value, "min_value" => min_value, "max_value" => max_value);
    layout!(v, "dlfuse_op_schema_t", dlfuse_op_schema_t; "struct_size" => struct_size, "name" => name,
            "since_minor" => since_minor, "num_inputs" => num_inputs, "inputs" => inputs,
            "num_outputs" => num_outputs, "outputs" => outputs, "num_attrs" => num_attrs,
            "attrs" => attrs, "shape_fn" => shape_fn, "plugin" => plugin);
    v.push(Item { name: "sizeof(dlfuse_status_t)".into(), c_expr: "sizeof(dlfuse_status_t)".into(),
                  rust: size_of::<dlfuse_status_t>() as u64 });
    v.push(Item { name: "sizeof(DLDeviceType)".into(), c_expr: "sizeof(DLDeviceType)".into(),
                  rust: size_of::<DLDeviceType>() as u64 });
    constants!(v; DLFUSE_MAX_NDIM, DLFUSE_MAX_ARGS, DLFUSE_MAX_ATTRS, DLFUSE_ARG_OPTIONAL, DLFUSE_ARG_REDUCIBLE,
        DLFUSE_ATTR_REQUIRED, DLFUSE_SHAPE_MATMUL, DLFUSE_SHAPE_BROADCAST, DLFUSE_SHAPE_LIKE, DLFUSE_SHAPE_CALLBACK);
    constants!(v; DLFUSE_ABI_MAJOR, DLFUSE_ABI_MINOR,
        DLFUSE_STATUS_OK, DLFUSE_STATUS_INVALID_ARGUMENT, DLFUSE_STATUS_UNSUPPORTED,
        DLFUSE_STATUS_NOT_FOUND, DLFUSE_STATUS_ABI_MISMATCH, DLFUSE_STATUS_LOAD_FAILED,
        DLFUSE_STATUS_UNAVAILABLE, DLFUSE_STATUS_OUT_OF_MEMORY, DLFUSE_STATUS_DEVICE_ERROR,
        DLFUSE_STATUS_INTERNAL,
        DLFUSE_ACT_IDENTITY, DLFUSE_ACT_RELU, DLFUSE_ACT_SIGMOID, DLFUSE_ACT_TANH,
        DLFUSE_ACT_GELU_ERF, DLFUSE_ACT_GELU_TANH, DLFUSE_ACT_SILU, DLFUSE_ACT_COUNT,
        DLFUSE_ATTR_ACTIVATION, DLFUSE_ATTR_MULTIPLIER, DLFUSE_ATTR_ALLOW_TF32,
        DLFUSE_ATTR_INT64, DLFUSE_ATTR_FLOAT64,
        DLFUSE_COPY_HOST_TO_DEVICE, DLFUSE_COPY_DEVICE_TO_HOST, DLFUSE_COPY_DEVICE_TO_DEVICE,
        DLFUSE_DISCOVER_NONE, DLFUSE_DISCOVER_ENV, DLFUSE_DISCOVER_INSTALL_DIR,
        DLFUSE_DISCOVER_DEFAULT,
        kDLCPU, kDLCUDA, kDLCUDAHost, kDLOpenCL, kDLVulkan, kDLMetal, kDLROCM, kDLCUDAManaged,
        kDLOneAPI, kDLInt, kDLUInt, kDLFloat, kDLOpaqueHandle, kDLBfloat, kDLComplex, kDLBool);
    v
}

/// The op names derived from ops.def (each must be types.h's macro of the same name) and the
/// plugin entry symbol.
fn string_constants() -> Vec<(&'static str, &'static [u8])> {
    let mut v = DLFUSE_CORE_OPS.to_vec();
    v.push(("DLFUSE_PLUGIN_ENTRY", DLFUSE_PLUGIN_ENTRY));
    v
}

fn include_dirs() -> Vec<PathBuf> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dlfuse = std::env::var_os("DLFUSE_INCLUDE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("../../../abi/include"));
    let dlpack = match std::env::var_os("DLPACK_INCLUDE_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            let out = Command::new("python3")
                .args(["-c", "import tvm_ffi.libinfo as l; print(l.find_dlpack_include_path())"])
                .output()
                .expect("python3 to find the DLPack header (or set DLPACK_INCLUDE_DIR)");
            assert!(out.status.success(), "no apache-tvm-ffi wheel: set DLPACK_INCLUDE_DIR");
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        }
    };
    vec![dlfuse, dlpack]
}

/// Compiles and runs a C program printing `name<TAB>value` for every item.
fn c_values(items: &[Item]) -> BTreeMap<String, String> {
    let mut src = String::from(
        "#include <stdio.h>\n#include <string.h>\n#include <dlfuse/dlfuse.h>\n#include <dlfuse/plugin.h>\nint main(void) {\n",
    );
    for it in items {
        src += &format!("  printf(\"%s\\t%llu\\n\", \"{}\", (unsigned long long)({}));\n", it.name, it.c_expr);
    }
    for (name, _) in string_constants() {
        src += &format!("  printf(\"%s\\t%s\\n\", \"{}\", {});\n", name, name);
    }
    src += "  return 0;\n}\n";
    let dir = std::env::temp_dir().join(format!("dlfuse_sys_layout_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c_file = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&c_file, src).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let mut cmd = Command::new(&cc);
    cmd.arg("-std=c11").arg("-o").arg(&exe).arg(&c_file);
    for d in include_dirs() {
        cmd.arg("-I").arg(d);
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run the C compiler {}: {}", cc, e));
    assert!(out.status.success(), "compiling the layout probe failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    let _ = std::fs::remove_dir_all(&dir);
    String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.split_once('\t').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect()
}

#[test]
fn declarations_match_the_c_headers() {
    let items = items();
    let c = c_values(&items);
    let mut bad = Vec::new();
    for it in &items {
        let want = &c[&it.name];
        if *want != it.rust.to_string() {
            bad.push(format!("{}: C {} Rust {}", it.name, want, it.rust));
        }
    }
    for (name, bytes) in string_constants() {
        let rust = std::str::from_utf8(bytes.strip_suffix(b"\0").expect("NUL-terminated")).unwrap();
        if c[name] != rust {
            bad.push(format!("{}: C {:?} Rust {:?}", name, c[name], rust));
        }
    }
    assert!(bad.is_empty(), "layout differs from the C headers:\n{}", bad.join("\n"));
    // A probe that checks nothing would pass too: make sure it saw every struct.
    assert!(items.len() > 100, "only {} items checked", items.len());
}

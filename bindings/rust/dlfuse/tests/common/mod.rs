//! What the tests share: where the plugins are, a float64 reference of the four ops, and
//! tensors laid out in the ways a caller may hand them over.
#![allow(dead_code)]
use std::path::PathBuf;

use dlfuse::{Discovery, Registry};

/// $DLFUSE_PLUGIN_DIR, else $DLFUSE_LIB_DIR/dlfuse/plugins (the CMake test sets both).
pub fn plugin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("DLFUSE_PLUGIN_DIR") {
        return PathBuf::from(d);
    }
    let lib = std::env::var_os("DLFUSE_LIB_DIR").expect("set DLFUSE_LIB_DIR to the folder of libdlfuse.so");
    PathBuf::from(lib).join("dlfuse/plugins")
}

/// The Rust plugin built by this workspace: $DLFUSE_RUST_PLUGIN, else the cdylib cargo
/// put next to this test's deps folder.
pub fn rust_plugin() -> PathBuf {
    if let Some(p) = std::env::var_os("DLFUSE_RUST_PLUGIN") {
        return PathBuf::from(p);
    }
    // Test executables live in target/<profile>/deps, where `cargo test --workspace`
    // also leaves the plugin's cdylib (only `cargo build` copies it one folder up).
    let deps = std::env::current_exe().unwrap().parent().unwrap().to_path_buf();
    let p = deps.join("libdlfuse_rust.so");
    assert!(p.exists(), "{} not built (cargo test --workspace builds it)", p.display());
    p
}

/// examples/cxx_plugin as the CMake tree builds it (with the unit tests):
/// $DLFUSE_EXAMPLE_PLUGIN, else $DLFUSE_LIB_DIR/../tests/unit_plugins/examples/libdlfuse_cxx_example.so.
pub fn example_plugin() -> PathBuf {
    if let Some(p) = std::env::var_os("DLFUSE_EXAMPLE_PLUGIN") {
        return PathBuf::from(p);
    }
    let lib = std::env::var_os("DLFUSE_LIB_DIR").expect("set DLFUSE_LIB_DIR to the folder of libdlfuse.so");
    let p = PathBuf::from(lib).join("../tests/unit_plugins/examples/libdlfuse_cxx_example.so");
    assert!(
        p.exists(),
        "{} not built (target dlfuse_cxx_example of the CMake tree; or set DLFUSE_EXAMPLE_PLUGIN)",
        p.display()
    );
    p
}

/// tests/plugins/testref's testref_ops build, for the ops it declares (testref_axpby):
/// $DLFUSE_TESTREF_OPS_PLUGIN, else $DLFUSE_LIB_DIR/../tests/plugins/libdlfuse_testref_ops.so.
pub fn testref_ops_plugin() -> PathBuf {
    if let Some(p) = std::env::var_os("DLFUSE_TESTREF_OPS_PLUGIN") {
        return PathBuf::from(p);
    }
    let lib = std::env::var_os("DLFUSE_LIB_DIR").expect("set DLFUSE_LIB_DIR to the folder of libdlfuse.so");
    let p = PathBuf::from(lib).join("../tests/plugins/libdlfuse_testref_ops.so");
    assert!(
        p.exists(),
        "{} not built (target dlfuse_testref_ops of the CMake tree; or set DLFUSE_TESTREF_OPS_PLUGIN)",
        p.display()
    );
    p
}

pub fn plugin_file(name: &str) -> PathBuf {
    if name == "rust" {
        return rust_plugin();
    }
    plugin_dir().join(format!("libdlfuse_{}.so", name))
}

/// A registry holding only `name`, checked to be available.
pub fn registry_with(name: &str) -> Registry {
    let reg = Registry::with_options(Discovery::NONE, &[plugin_file(name)]).unwrap();
    let plugins = reg.plugins().unwrap();
    assert_eq!(plugins.len(), 1);
    assert!(plugins[0].available, "{}: {}", name, plugins[0].reason);
    assert_eq!(plugins[0].name, name);
    reg
}

pub const CPU_PLUGINS: [&str; 3] = ["onednn", "testref", "rust"];

/// Deterministic values in [-1, 1], some of them exactly 0 (relu'(0) = 0 gets exercised).
pub struct Lcg(u64);
impl Lcg {
    pub fn new(seed: u64) -> Lcg {
        Lcg(seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407))
    }
    pub fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let v = ((self.0 >> 40) % 33) as f32 / 16.0 - 1.0; // dyadic: exact in f32
        v
    }
    pub fn tensor(&mut self, shape: &[i64]) -> Dense {
        let n = numel(shape);
        Dense { shape: shape.to_vec(), data: (0..n).map(|_| self.next() as f64).collect(), scale: vec![0.0; n] }
    }
}

pub fn numel(shape: &[i64]) -> usize {
    shape.iter().map(|&d| d as usize).product()
}

/// A compact float64 tensor; `scale` is the condition bound of each element (docs/ops.md,
/// Tolerances): sum of |terms| for sums, |value| for pointwise results.
#[derive(Clone, Debug)]
pub struct Dense {
    pub shape: Vec<i64>,
    pub data: Vec<f64>,
    pub scale: Vec<f64>,
}

impl Dense {
    pub fn zeros(shape: &[i64]) -> Dense {
        let n = numel(shape);
        Dense { shape: shape.to_vec(), data: vec![0.0; n], scale: vec![0.0; n] }
    }
    pub fn f32(&self) -> Vec<f32> {
        self.data.iter().map(|&v| v as f32).collect()
    }
}

pub fn broadcast_shape(a: &[i64], b: &[i64]) -> Vec<i64> {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| {
            let da = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
            let db = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
            if da == 1 { db } else { da }
        })
        .collect()
}

/// Multi-index of linear index `i` in `shape`.
pub fn unravel(mut i: usize, shape: &[i64]) -> Vec<i64> {
    let mut idx = vec![0i64; shape.len()];
    for d in (0..shape.len()).rev() {
        let s = shape[d] as usize;
        idx[d] = (i % s) as i64;
        i /= s;
    }
    idx
}

/// Linear index in `shape` of the element an index of the broadcast shape reads.
pub fn bcast_at(idx: &[i64], shape: &[i64]) -> usize {
    let lead = idx.len() - shape.len();
    let mut lin = 0usize;
    for d in 0..shape.len() {
        let v = if shape[d] == 1 { 0 } else { idx[d + lead] };
        lin = lin * shape[d] as usize + v as usize;
    }
    lin
}

/// reduce_to(G, shape) with the scale of each sum.
pub fn reduce_to(g: &[f64], gscale: &[f64], full: &[i64], shape: &[i64]) -> Dense {
    let mut r = Dense::zeros(shape);
    for i in 0..numel(full) {
        let j = bcast_at(&unravel(i, full), shape);
        r.data[j] += g[i];
        r.scale[j] += gscale[i];
    }
    r
}

fn relu(v: f64) -> f64 {
    if v > 0.0 || v.is_nan() { v } else { 0.0 }
}

pub struct MatmulRef {
    pub out: Dense,
}

/// out = relu(a @ b + bias), a [.., M, K], b [.., K, N].
pub fn matmul_ref(a: &Dense, b: &Dense, bias: &Dense) -> Dense {
    let (na, nb) = (a.shape.len(), b.shape.len());
    let (m, k, n) = (a.shape[na - 2], a.shape[na - 1], b.shape[nb - 1]);
    let mut shape = broadcast_shape(&a.shape[..na - 2], &b.shape[..nb - 2]);
    shape.extend_from_slice(&[m, n]);
    let mut out = Dense::zeros(&shape);
    for i in 0..numel(&shape) {
        let idx = unravel(i, &shape);
        let nd = idx.len();
        let (r, c) = (idx[nd - 2], idx[nd - 1]);
        let (mut sum, mut sc) = (0.0, 0.0);
        for p in 0..k {
            let mut ia = idx[..nd - 2].to_vec();
            ia.extend_from_slice(&[r, p]);
            let mut ib = idx[..nd - 2].to_vec();
            ib.extend_from_slice(&[p, c]);
            let t = a.data[bcast_at(&ia, &a.shape)] * b.data[bcast_at(&ib, &b.shape)];
            sum += t;
            sc += t.abs();
        }
        let bv = bias.data[bcast_at(&idx, &bias.shape)];
        out.data[i] = relu(sum + bv);
        out.scale[i] = sc + bv.abs();
    }
    out
}

/// (grad_a, grad_b, grad_bias) of matmul_add_relu.
pub fn matmul_backward_ref(g: &Dense, a: &Dense, b: &Dense, out: &Dense, bias_shape: &[i64]) -> (Dense, Dense, Dense) {
    let shape = out.shape.clone();
    let nd = shape.len();
    let (na, nb) = (a.shape.len(), b.shape.len());
    let (m, k, n) = (a.shape[na - 2], a.shape[na - 1], b.shape[nb - 1]);
    let dz: Vec<f64> = (0..numel(&shape))
        .map(|i| if out.data[i] > 0.0 || out.data[i].is_nan() { g.data[i] } else { 0.0 })
        .collect();
    let batch = &shape[..nd - 2];
    let mut full_a = batch.to_vec();
    full_a.extend_from_slice(&[m, k]);
    let mut full_b = batch.to_vec();
    full_b.extend_from_slice(&[k, n]);
    let (mut ga, mut gas) = (vec![0.0; numel(&full_a)], vec![0.0; numel(&full_a)]);
    let (mut gb, mut gbs) = (vec![0.0; numel(&full_b)], vec![0.0; numel(&full_b)]);
    for i in 0..numel(&shape) {
        let idx = unravel(i, &shape);
        let (r, c) = (idx[nd - 2], idx[nd - 1]);
        let bi = numel(batch).max(1);
        let batch_lin = if batch.is_empty() { 0 } else { i / (m * n) as usize };
        let _ = bi;
        for p in 0..k {
            let mut ia = idx[..nd - 2].to_vec();
            ia.extend_from_slice(&[r, p]);
            let mut ib = idx[..nd - 2].to_vec();
            ib.extend_from_slice(&[p, c]);
            let ta = dz[i] * b.data[bcast_at(&ib, &b.shape)];
            let ja = batch_lin * (m * k) as usize + (r * k + p) as usize;
            ga[ja] += ta;
            gas[ja] += ta.abs();
            let tb = a.data[bcast_at(&ia, &a.shape)] * dz[i];
            let jb = batch_lin * (k * n) as usize + (p * n + c) as usize;
            gb[jb] += tb;
            gbs[jb] += tb.abs();
        }
    }
    let dzs: Vec<f64> = dz.iter().map(|v| v.abs()).collect();
    (
        reduce_to(&ga, &gas, &full_a, &a.shape),
        reduce_to(&gb, &gbs, &full_b, &b.shape),
        reduce_to(&dz, &dzs, &shape, bias_shape),
    )
}

/// The standard normal CDF by Simpson's rule on its density (std has no erf, and the
/// reference must not share code with a kernel): 1e-12 for |p| <= 8.
pub fn normal_cdf(p: f64) -> f64 {
    let n = 4000;
    let h = p / n as f64;
    let f = |t: f64| (-0.5 * t * t).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let mut s = f(0.0) + f(p);
    for i in 1..n {
        s += f(i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
    }
    0.5 + s * h / 3.0
}

pub fn act(kind: dlfuse::Activation, p: f64) -> f64 {
    use dlfuse::Activation::*;
    let phi = normal_cdf;
    let sig = |p: f64| 1.0 / (1.0 + (-p).exp());
    match kind {
        Identity => p,
        Relu => relu(p),
        Sigmoid => sig(p),
        Tanh => p.tanh(),
        GeluErf => p * phi(p),
        GeluTanh => 0.5 * p * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (p + 0.044715 * p * p * p)).tanh()),
        Silu => p * sig(p),
    }
}

/// act'(p), by central differences of `act` in float64 (a check independent of the
/// closed forms the kernels use); relu is the select of docs/ops.md.
pub fn act_grad(kind: dlfuse::Activation, p: f64) -> f64 {
    if kind == dlfuse::Activation::Relu {
        return if p > 0.0 || p.is_nan() { 1.0 } else { 0.0 };
    }
    let h = 1e-5;
    (act(kind, p + h) - act(kind, p - h)) / (2.0 * h)
}

pub fn add_mul_ref(x: &Dense, y: &Dense, bias: &Dense, m: f64, kind: dlfuse::Activation) -> Dense {
    let shape = broadcast_shape(&broadcast_shape(&x.shape, &y.shape), &bias.shape);
    let mut out = Dense::zeros(&shape);
    for i in 0..numel(&shape) {
        let idx = unravel(i, &shape);
        let p = x.data[bcast_at(&idx, &x.shape)] + bias.data[bcast_at(&idx, &bias.shape)] + m * y.data[bcast_at(&idx, &y.shape)];
        out.data[i] = act(kind, p);
        out.scale[i] = out.data[i].abs();
    }
    out
}

pub fn add_mul_backward_ref(g: &Dense, x: &Dense, y: &Dense, bias: &Dense, m: f64, kind: dlfuse::Activation) -> (Dense, Dense, Dense) {
    let shape = g.shape.clone();
    let mut d = vec![0.0; numel(&shape)];
    for i in 0..numel(&shape) {
        let idx = unravel(i, &shape);
        let p = x.data[bcast_at(&idx, &x.shape)] + bias.data[bcast_at(&idx, &bias.shape)] + m * y.data[bcast_at(&idx, &y.shape)];
        d[i] = if kind == dlfuse::Activation::Relu {
            if p > 0.0 || p.is_nan() { g.data[i] } else { 0.0 }
        } else {
            g.data[i] * act_grad(kind, p)
        };
    }
    let ds: Vec<f64> = d.iter().map(|v| v.abs()).collect();
    let md: Vec<f64> = d.iter().map(|v| m * v).collect();
    let mds: Vec<f64> = md.iter().map(|v| v.abs()).collect();
    (reduce_to(&d, &ds, &shape, &x.shape), reduce_to(&md, &mds, &shape, &y.shape), reduce_to(&d, &ds, &shape, &bias.shape))
}

/// How a tensor is laid out in its storage.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Layout {
    /// Compact, NULL strides.
    Compact,
    /// The last two dims swapped in storage (explicit strides).
    Transposed,
    /// Compact after 3 elements of padding, reached through byte_offset; NULL strides.
    Offset,
    /// Rows 2 elements longer than needed (explicit strides).
    Padded,
}

/// Storage for `shape` in `layout`: (element count, strides or None, byte offset).
pub fn plan(shape: &[i64], layout: Layout) -> (usize, Option<Vec<i64>>, u64) {
    let nd = shape.len();
    let compact = |s: &[i64]| {
        let mut st = vec![0i64; s.len()];
        let mut acc = 1;
        for d in (0..s.len()).rev() {
            st[d] = acc;
            acc *= s[d].max(1);
        }
        st
    };
    match layout {
        Layout::Compact => (numel(shape), None, 0),
        Layout::Offset => (numel(shape) + 3, None, 12),
        Layout::Transposed if nd >= 2 => {
            let mut s = shape.to_vec();
            s.swap(nd - 1, nd - 2);
            let mut st = compact(&s);
            st.swap(nd - 1, nd - 2);
            (numel(shape), Some(st), 0)
        }
        Layout::Padded if nd >= 1 => {
            let mut s = shape.to_vec();
            s[nd - 1] += 2;
            (numel(&s), Some(compact(&s)), 0)
        }
        _ => (numel(shape), None, 0),
    }
}

/// Element offsets of every index of `shape` in a storage of `plan`, row-major.
pub fn offsets(shape: &[i64], strides: &Option<Vec<i64>>, byte_offset: u64) -> Vec<usize> {
    let st = strides.clone().unwrap_or_else(|| {
        let mut st = vec![0i64; shape.len()];
        let mut acc = 1;
        for d in (0..shape.len()).rev() {
            st[d] = acc;
            acc *= shape[d].max(1);
        }
        st
    });
    (0..numel(shape))
        .map(|i| {
            let idx = unravel(i, shape);
            (byte_offset / 4) as usize + idx.iter().zip(&st).map(|(a, b)| (a * b) as usize).sum::<usize>()
        })
        .collect()
}

/// A float32 storage holding `t` in `layout`, poisoned elsewhere.
pub struct Stored {
    pub shape: Vec<i64>,
    pub buf: Vec<f32>,
    pub strides: Option<Vec<i64>>,
    pub byte_offset: u64,
}

impl Stored {
    pub fn new(t: &Dense, layout: Layout) -> Stored {
        let (n, strides, byte_offset) = plan(&t.shape, layout);
        let mut buf = vec![-777.0f32; n];
        for (i, off) in offsets(&t.shape, &strides, byte_offset).into_iter().enumerate() {
            buf[off] = t.data[i] as f32;
        }
        Stored { shape: t.shape.clone(), buf, strides, byte_offset }
    }
    pub fn output(shape: &[i64], layout: Layout) -> Stored {
        Stored::new(&Dense::zeros(shape), layout).poisoned()
    }
    fn poisoned(mut self) -> Stored {
        for v in self.buf.iter_mut() {
            *v = 12345.0;
        }
        self
    }
    pub fn view(&self) -> dlfuse::TensorView<'_> {
        dlfuse::TensorView::strided(&self.buf, &self.shape, self.strides.as_deref(), self.byte_offset).unwrap()
    }
    pub fn view_mut(&mut self) -> dlfuse::TensorViewMut<'_> {
        dlfuse::TensorViewMut::strided(&mut self.buf, &self.shape, self.strides.as_deref(), self.byte_offset).unwrap()
    }
    pub fn values(&self) -> Vec<f32> {
        offsets(&self.shape, &self.strides, self.byte_offset).into_iter().map(|o| self.buf[o]).collect()
    }
}

/// Every element within docs/ops.md's float32 bound; NaN only where the reference is NaN.
pub fn assert_close(what: &str, got: &[f32], want: &Dense) {
    assert_eq!(got.len(), want.data.len(), "{}: element count", what);
    for i in 0..got.len() {
        let (g, w) = (got[i] as f64, want.data[i]);
        let ok = if w.is_nan() || g.is_nan() {
            w.is_nan() && g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= 1e-6 + 2e-5 * want.scale[i]
        };
        assert!(ok, "{}[{:?}]: got {}, expected {} (scale {})", what, unravel(i, &want.shape), g, w, want.scale[i]);
    }
}

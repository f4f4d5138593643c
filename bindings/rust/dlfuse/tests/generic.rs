//! Any op by name through its schema (ABI 1.2): a core op, and the op examples/cxx_plugin
//! declares, with no code for either in this crate.
mod common;

use dlfuse::{AttrValue, Discovery, Registry, Status, TensorView};

/// examples/cxx_plugin built by the CMake tree ($DLFUSE_EXAMPLE_PLUGIN).
fn example_plugin() -> std::path::PathBuf {
    std::path::PathBuf::from(std::env::var_os("DLFUSE_EXAMPLE_PLUGIN").expect("set DLFUSE_EXAMPLE_PLUGIN"))
}

/// Deterministic values in [-2, 2) (a fixed-seed LCG: reproducible, fresh per seed).
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 4.0 - 2.0
        })
        .collect()
}

#[test]
fn declared_op_runs_by_name_against_a_float64_reference() {
    let reg = Registry::with_options(Discovery::NONE, &[example_plugin()]).unwrap();
    let schemas = reg.op_schemas().unwrap();
    let outer = schemas.iter().find(|s| s.name == "cxx_example_outer").expect("the example's op is listed");
    assert!(outer.plugin.is_some());
    assert_eq!(outer.inputs.iter().map(|a| a.name.as_str()).collect::<Vec<_>>(), ["x", "y"]);
    assert_eq!(outer.attrs[0].name, "SCALE");

    let (x, y) = (values(4, 1), values(6, 2));
    let scale = values(1, 3)[0];
    let xv = TensorView::new(&x[..], &[4]).unwrap();
    let yv = TensorView::new(&y[..], &[6]).unwrap();
    let out = reg.call::<f64>("cxx_example_outer", &[Some(&xv), Some(&yv)], &[("scale", AttrValue::Float(scale))]).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].shape, [4, 6]);
    for i in 0..4 {
        for j in 0..6 {
            let want = scale * x[i] * y[j];
            let got = out[0].data[i * 6 + j];
            assert!((got - want).abs() <= 1e-12 * want.abs().max(1.0), "[{}, {}]: {} vs {}", i, j, got, want);
        }
    }
    // Validated by its schema: a 2-D x is refused with the shape callback's message.
    let x2 = TensorView::new(&x[..], &[2, 2]).unwrap();
    let err = reg.call::<f64>("cxx_example_outer", &[Some(&x2), Some(&yv)], &[]).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("x: expected 1 dim"), "{}", err.message());
    let err = reg.call::<f64>("cxx_example_outer", &[Some(&xv), Some(&yv)], &[("no_such", AttrValue::Int(1))]).unwrap_err();
    assert!(err.message().contains("no_such"), "{}", err.message());
}

#[test]
fn core_op_runs_by_name_with_inferred_outputs() {
    let reg = common::registry_with("testref");
    let (m, k, n) = (3usize, 5usize, 4usize);
    let (a, b, bias) = (values(m * k, 4), values(k * n, 5), values(n, 6));
    let av = TensorView::new(&a[..], &[m as i64, k as i64]).unwrap();
    let bv = TensorView::new(&b[..], &[k as i64, n as i64]).unwrap();
    let biasv = TensorView::new(&bias[..], &[n as i64]).unwrap();
    let out = reg.call::<f64>("matmul_add_relu", &[Some(&av), Some(&bv), Some(&biasv)], &[]).unwrap();
    assert_eq!(out[0].shape, [m as i64, n as i64]);
    for i in 0..m {
        for j in 0..n {
            let pre: f64 = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum::<f64>() + bias[j];
            let want = pre.max(0.0);
            assert!((out[0].data[i * n + j] - want).abs() <= 1e-12 * want.abs().max(1.0));
        }
    }
}

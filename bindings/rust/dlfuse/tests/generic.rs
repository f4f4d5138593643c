//! Any op by name through its schema (ABI 1.2): a core op, and the op examples/cxx_plugin
//! declares, with no code for either in this crate.
mod common;

use common::example_plugin;
use dlfuse::{AttrValue, Discovery, OutputShape, Registry, Status, TensorView, TensorViewMut};

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

/// relu(a @ b + bias) with a [B, M, K], b [K, N], bias [N], then its backward: grad_bias is
/// reducible (its rule is LIKE grad_out, [B, M, N]) and comes back at the shape asked for.
#[test]
fn reducible_output_comes_back_at_the_shape_asked_for() {
    let reg = common::registry_with("testref");
    let (bt, m, k, n) = (2usize, 3usize, 5usize, 4usize);
    let (a, b, bias, g) = (values(bt * m * k, 7), values(k * n, 8), values(n, 9), values(bt * m * n, 10));
    let av = TensorView::new(&a[..], &[bt as i64, m as i64, k as i64]).unwrap();
    let bv = TensorView::new(&b[..], &[k as i64, n as i64]).unwrap();
    let biasv = TensorView::new(&bias[..], &[n as i64]).unwrap();
    let out = reg.call::<f64>("matmul_add_relu", &[Some(&av), Some(&bv), Some(&biasv)], &[]).unwrap().remove(0);
    assert_eq!(out.shape, [bt as i64, m as i64, n as i64]);
    let outv = TensorView::new(&out.data[..], &out.shape).unwrap();
    let gv = TensorView::new(&g[..], &out.shape).unwrap();
    let inputs = [Some(&gv), Some(&av), Some(&bv), Some(&outv)];

    let schema = reg.op_schemas().unwrap().into_iter().find(|s| s.name == "matmul_add_relu_backward").unwrap();
    let reducible: Vec<bool> = schema.outputs.iter().map(|o| o.reducible).collect();
    assert_eq!(reducible, [false, false, true]); // grad_a, grad_b, grad_bias

    // grad_out * relu'(pre), relu'(pre) = [out > 0], summed over the broadcast dims (B, M).
    let mut want = vec![0.0f64; n];
    for r in 0..bt * m {
        for j in 0..n {
            if out.data[r * n + j] > 0.0 {
                want[j] += g[r * n + j];
            }
        }
    }
    let shaped = reg
        .call_with::<f64>(
            "matmul_add_relu_backward",
            &inputs,
            &[],
            &[OutputShape::Inferred, OutputShape::Skip, OutputShape::Given(&[n as i64])],
        )
        .unwrap();
    assert_eq!(shaped.len(), 3);
    assert_eq!(shaped[0].as_ref().unwrap().shape, [bt as i64, m as i64, k as i64]);
    assert!(shaped[1].is_none(), "grad_b was skipped");
    let grad_bias = shaped[2].as_ref().unwrap();
    assert_eq!(grad_bias.shape, [n as i64], "grad_bias at the bias's shape");
    for j in 0..n {
        assert!((grad_bias.data[j] - want[j]).abs() <= 1e-12 * want[j].abs().max(1.0), "[{}]: {} vs {}", j, grad_bias.data[j], want[j]);
    }

    // `call` gives the widest shape; summed over (B, M) it is the same gradient.
    let full = reg.call::<f64>("matmul_add_relu_backward", &inputs, &[]).unwrap();
    assert_eq!(full[2].shape, [bt as i64, m as i64, n as i64]);
    for j in 0..n {
        let sum: f64 = (0..bt * m).map(|r| full[2].data[r * n + j]).sum();
        assert!((sum - grad_bias.data[j]).abs() <= 1e-12 * sum.abs().max(1.0));
    }

    // Into outputs the caller made: grad_bias as [1, N], broadcasting to [B, M, N] too.
    let mut gb = vec![f64::NAN; n];
    let mut gbv = TensorViewMut::new(&mut gb[..], &[1, n as i64]).unwrap();
    reg.call_into("matmul_add_relu_backward", &inputs, &[], &mut [None, None, Some(&mut gbv)]).unwrap();
    drop(gbv);
    for j in 0..n {
        assert!((gb[j] - want[j]).abs() <= 1e-12 * want[j].abs().max(1.0));
    }

    // A shape that does not broadcast to the rule's is refused by the registry, naming it.
    let err = reg
        .call_with::<f64>(
            "matmul_add_relu_backward",
            &inputs,
            &[],
            &[OutputShape::Skip, OutputShape::Skip, OutputShape::Given(&[3])],
        )
        .unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("argument 'grad_bias'"), "{}", err.message());
    assert!(err.message().contains("[3]"), "{}", err.message());
}

/// What this crate refuses before any call names the argument, the expected and the actual
/// value, as the registry's messages do.
#[test]
fn generic_call_errors_name_the_argument_the_expected_and_the_actual_value() {
    let reg = common::registry_with("testref");
    let (a, b, bias3) = (vec![1.0f32; 6], vec![1.0f32; 6], vec![0.0f32; 3]);
    let av = TensorView::new(&a[..], &[3, 2]).unwrap();
    let bv = TensorView::new(&b[..], &[2, 3]).unwrap();
    let bias3v = TensorView::new(&bias3[..], &[3]).unwrap();
    let inputs = [Some(&av), Some(&bv), Some(&bias3v)];

    // float32 inputs, float64 outputs asked for.
    let err = reg.call::<f64>("matmul_add_relu", &inputs, &[]).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert_eq!(
        err.message(),
        "matmul_add_relu: output 'out': expected dtype float32 (the inputs' dtype), got float64 \
         (the element type the call asked for)"
    );
    let err = reg.call::<f64>("matmul_add_relu", &inputs, &[("no_such", AttrValue::Int(1))]).unwrap_err();
    assert_eq!(err.message(), "matmul_add_relu: attribute 'no_such': expected one of ALLOW_TF32, got 'no_such'");
    let err = reg.call::<f32>("matmul_add_relu", &inputs, &[("allow_tf32", AttrValue::Float(0.5))]).unwrap_err();
    assert_eq!(err.message(), "matmul_add_relu: attribute ALLOW_TF32: expected an integer (INT64), got the float 0.5");
    let err = reg.call_with::<f32>("matmul_add_relu", &inputs, &[], &[]).unwrap_err();
    assert_eq!(err.message(), "matmul_add_relu: outputs: expected 1 entries (one per output: out), got 0");
    let err = reg.call_with::<f32>("matmul_add_relu", &inputs, &[], &[OutputShape::Given(&[3, -1])]).unwrap_err();
    assert_eq!(err.message(), "matmul_add_relu: output 'out': expected sizes >= 0, got shape [3, -1] (shape[1] is -1)");
    // The registry's own refusals pass through unchanged: out at the wrong shape.
    let err = reg.call_with::<f32>("matmul_add_relu", &inputs, &[], &[OutputShape::Given(&[3, 2])]).unwrap_err();
    assert!(err.message().starts_with("matmul_add_relu: argument 'out': shape is [3, 2]; expected [3, 3]"), "{}", err.message());

    // Dtypes are spelled as the registry spells them.
    assert_eq!(dlfuse::FLOAT32.to_string(), "float32");
    assert_eq!(dlfuse::BFLOAT16.to_string(), "bfloat16");
    assert_eq!(dlfuse::DataType { code: 0, bits: 8, lanes: 4 }.to_string(), "int8x4");

    let e = Registry::with_options(Discovery::NONE, &["/a\0b"]).err().unwrap();
    assert_eq!(e.message(), "plugin_paths[0]: expected a path without a NUL byte, got \"/a\\0b\"");
}

// add_mul_activation forward, vec4 along the innermost dim: the host takes this form when
// n2 is a multiple of 4, out and every input that varies along dim 2 are contiguous there
// with rows starting at multiples of 4 elements, and the other inputs are broadcast along
// it (stride 0). The grid is linear over the n0 * n1 * n2/4 vec4s, so narrow rows fill
// whole workgroups too.
//
// Each invocation does V4 vec4s (the host sets V4), PW apart, and issues all of their loads
// before any store: out may alias x, so the compiler could not move a later load above an
// earlier store, and one vec4 in flight per invocation leaves a fast GPU's memory idle.
//
// prm: n0 n1 n2/4 act mult modes | views x@6 y@10 bias@14 out@18. modes bit i (x, y, bias):
// the input is read as vec4 (its view in vec4 units, s2 = 1); else it is broadcast along
// dim 2 (view in elements, s2 = 0) and one element fills the vec4.

const PW_I: i32 = i32(PW);

// The parameter block as a uniform block (see pointwise.wgsl).
@group(0) @binding(0) var<uniform> prm: array<vec4<i32>, 16>;
fn pr(i: i32) -> i32 { return prm[i / 4][i % 4]; }

@group(0) @binding(1) var<storage, read_write> x4: array<vec4<T>>;
@group(0) @binding(2) var<storage, read_write> y4: array<vec4<T>>;
@group(0) @binding(3) var<storage, read_write> b4: array<vec4<T>>;
@group(0) @binding(4) var<storage, read_write> o4: array<vec4<T>>;
@group(0) @binding(5) var<storage, read_write> xs: array<T>;
@group(0) @binding(6) var<storage, read_write> ys: array<T>;
@group(0) @binding(7) var<storage, read_write> bs: array<T>;

// x + bias + mult * y at vec4 (i0, i1, q).
fn amx_pre4(i0: i32, i1: i32, q: i32, modes: i32, mult: f32) -> vec4<f32> {
  var xv: vec4<f32>;
  var yv: vec4<f32>;
  var bv: vec4<f32>;
  if ((modes & 1) != 0) { xv = vec4<f32>(x4[at(6, i0, i1, q)]); } else { xv = vec4<f32>(f32(xs[at(6, i0, i1, 0)])); }
  if ((modes & 2) != 0) { yv = vec4<f32>(y4[at(10, i0, i1, q)]); } else { yv = vec4<f32>(f32(ys[at(10, i0, i1, 0)])); }
  if ((modes & 4) != 0) { bv = vec4<f32>(b4[at(14, i0, i1, q)]); } else { bv = vec4<f32>(f32(bs[at(14, i0, i1, 0)])); }
  return xv + bv + mult * yv;
}

// Row r of the collapsed grid as (i0, i1); no division in the usual n0 = 1.
fn split_row(r: i32, n0: i32, n1: i32) -> vec2<i32> {
  if (n0 == 1) { return vec2<i32>(0, r); }
  let i0 = r / n1;
  return vec2<i32>(i0, r - i0 * n1);
}

@compute @workgroup_size(PW)
fn amx_fwd4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
  let n0 = pr(0);
  let n1 = pr(1);
  let m2 = pr(2);
  let total = n0 * n1 * m2;
  let first = i32(wid.y * nwg.x + wid.x) * (PW_I * V4) + i32(lid);
  let modes = pr(5);
  let mult = prm_f(4);
  let act = pr(3);
  // Loads first (an item past the end reads the last vec4 and is not stored)...
  var pre: array<vec4<f32>, V4>;
  var row: array<i32, V4>;
  var col: array<i32, V4>;
  for (var j = 0; j < V4; j++) {
    let g = min(first + j * PW_I, total - 1);
    let r = g / m2;
    row[j] = r;
    col[j] = g - r * m2;
    let i = split_row(r, n0, n1);
    pre[j] = amx_pre4(i.x, i.y, col[j], modes, mult);
  }
  // ... then the activations and stores.
  for (var j = 0; j < V4; j++) {
    if (first + j * PW_I < total) {
      let p = pre[j];
      let i = split_row(row[j], n0, n1);
      o4[at(18, i.x, i.y, col[j])] =
          vec4<T>(vec4<f32>(act_fwd(p.x, act), act_fwd(p.y, act), act_fwd(p.z, act), act_fwd(p.w, act)));
    }
  }
}

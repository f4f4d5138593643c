// add_mul_activation forward, four elements per invocation along the innermost dim: the
// host takes this form when n2 is a multiple of 4, out and every input that varies along
// dim 2 are contiguous there with rows starting at multiples of 4 elements, and the other
// inputs are broadcast along it (stride 0). Fewer instructions per byte than amx_fwd, which
// a memory-bound kernel on a fast GPU needs.
//
// prm: n0 n1 n2/4 act mult modes | views x@6 y@10 bias@14 out@18. modes bit i (x, y, bias):
// the input is read as vec4 (its view in vec4 units, s2 = 1); else it is broadcast along
// dim 2 (view in elements, s2 = 0) and one element fills the vec4.

@group(0) @binding(1) var<storage, read_write> x4: array<vec4<T>>;
@group(0) @binding(2) var<storage, read_write> y4: array<vec4<T>>;
@group(0) @binding(3) var<storage, read_write> b4: array<vec4<T>>;
@group(0) @binding(4) var<storage, read_write> o4: array<vec4<T>>;
@group(0) @binding(5) var<storage, read_write> xs: array<T>;
@group(0) @binding(6) var<storage, read_write> ys: array<T>;
@group(0) @binding(7) var<storage, read_write> bs: array<T>;

@compute @workgroup_size(PW)
fn amx_fwd4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let q = i32(wid.x * PW + lid);
  if (q >= prm[2]) { return; }
  let i0 = i32(wid.z);
  let i1 = i32(wid.y);
  let modes = prm[5];
  var xv: vec4<f32>;
  var yv: vec4<f32>;
  var bv: vec4<f32>;
  if ((modes & 1) != 0) { xv = vec4<f32>(x4[at(6, i0, i1, q)]); } else { xv = vec4<f32>(f32(xs[at(6, i0, i1, 0)])); }
  if ((modes & 2) != 0) { yv = vec4<f32>(y4[at(10, i0, i1, q)]); } else { yv = vec4<f32>(f32(ys[at(10, i0, i1, 0)])); }
  if ((modes & 4) != 0) { bv = vec4<f32>(b4[at(14, i0, i1, q)]); } else { bv = vec4<f32>(f32(bs[at(14, i0, i1, 0)])); }
  let p = xv + bv + prm_f(4) * yv;
  let act = prm[3];
  o4[at(18, i0, i1, q)] = vec4<T>(vec4<f32>(act_fwd(p.x, act), act_fwd(p.y, act), act_fwd(p.z, act), act_fwd(p.w, act)));
}

// add_mul_activation forward/backward, the matmul backwards' dz, and reductions. Each runs
// over the (collapsed) output grid [n0, n1, n2] = pr(0..2), one element per invocation.

// The parameter block, at most 64 words, as a uniform block: the shader compiler turns a
// word at a constant index into an operand of the instruction that uses it, where a
// storage buffer's word is a load (a memory-bound kernel's issue slots and latency).
@group(0) @binding(0) var<uniform> prm: array<vec4<i32>, 16>;
fn pr(i: i32) -> i32 { return prm[i / 4][i % 4]; }

@group(0) @binding(1) var<storage, read_write> t1: array<T>;
@group(0) @binding(2) var<storage, read_write> t2: array<T>;
@group(0) @binding(3) var<storage, read_write> t3: array<T>;
@group(0) @binding(4) var<storage, read_write> t4: array<T>;
@group(0) @binding(5) var<storage, read_write> t5: array<T>;
@group(0) @binding(6) var<storage, read_write> t6: array<T>;
@group(0) @binding(7) var<storage, read_write> t7: array<T>;
@group(0) @binding(8) var<storage, read_write> tf: array<f32>;

struct Grid { i0: i32, i1: i32, i2: i32, ok: bool }

// The grid point of this invocation. Usually workgroups x cover n2 (256 per workgroup), y
// n1 and z n0: no divisions. Where n0 or n1 exceeds a dispatch dimension the host passes
// -n0 and a 2-D grid of workgroups whose linear index is split here.
fn grid(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> Grid {
  let n1 = pr(1);
  let n2 = pr(2);
  if (pr(0) >= 0) {
    let i2 = i32(wid.x * PW + lid);
    return Grid(i32(wid.z), i32(wid.y), i2, i2 < n2);
  }
  let n0 = -pr(0);
  let i = linear_id(wid, nwg, lid);
  let i2 = i % n2;
  let r = i / n2;
  return Grid(r / n1, r % n1, i2, r / n1 < n0);
}

// out = act(x + bias + multiplier * y); x t1, y t2, bias t3, out t4 (may be x itself).
// prm: n0 n1 n2 act mult | views x@5 y@9 bias@13 out@17.
@compute @workgroup_size(PW)
fn amx_fwd(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
  let g = grid(wid, nwg, lid);
  if (!g.ok) { return; }
  let p = f32(t1[at(5, g.i0, g.i1, g.i2)]) + f32(t3[at(13, g.i0, g.i1, g.i2)]) +
          prm_f(4) * f32(t2[at(9, g.i0, g.i1, g.i2)]);
  t4[at(17, g.i0, g.i1, g.i2)] = T(act_fwd(p, pr(3)));
}

// add_mul's backward, d_pre at every element from x + bias + multiplier * y or (from_out)
// from the forward's out, passed in x's place. grad_out t1, x t2, y t3, bias t4; gradients
// of the output's shape are written directly (`direct` bits: 1 grad_x t5, 2 grad_y t6,
// 4 grad_bias t7); d_pre goes to the float scratch tf when has_tmp, for reductions.
// prm: n0 n1 n2 act mult direct from_out has_tmp | views g@8 x@12 y@16 b@20 gx@24 gy@28
// gb@32 tmp@36.
@compute @workgroup_size(PW)
fn amx_bwd(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
  let g = grid(wid, nwg, lid);
  if (!g.ok) { return; }
  let act = pr(3);
  let mult = prm_f(4);
  let direct = pr(5);
  let go = f32(t1[at(8, g.i0, g.i1, g.i2)]);
  var d: f32;
  if (pr(6) != 0) {
    d = d_out(go, f32(t2[at(12, g.i0, g.i1, g.i2)]), act);
  } else {
    let p = f32(t2[at(12, g.i0, g.i1, g.i2)]) + f32(t4[at(20, g.i0, g.i1, g.i2)]) +
            mult * f32(t3[at(16, g.i0, g.i1, g.i2)]);
    d = d_pre(go, p, act);
  }
  if ((direct & 1) != 0) { t5[at(24, g.i0, g.i1, g.i2)] = T(d); }
  if ((direct & 2) != 0) { t6[at(28, g.i0, g.i1, g.i2)] = T(mult * d); }
  if ((direct & 4) != 0) { t7[at(32, g.i0, g.i1, g.i2)] = T(d); }
  if (pr(7) != 0) { tf[at(36, g.i0, g.i1, g.i2)] = d; }
}

// The matmul backwards' dz = grad_out * act'(src), src being pre or (from_out) out.
// grad_out t1, src t2, dz t3. prm: n0 n1 n2 act from_out | views g@5 src@9 dz@13.
@compute @workgroup_size(PW)
fn act_dz(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
  let g = grid(wid, nwg, lid);
  if (!g.ok) { return; }
  let v = d_act(f32(t1[at(5, g.i0, g.i1, g.i2)]), f32(t2[at(9, g.i0, g.i1, g.i2)]), pr(3), pr(4) != 0);
  t3[at(13, g.i0, g.i1, g.i2)] = T(v);
}

// Reductions: dst[kept] = scale * sum over the reduced dims of src (src: t1, or the float
// scratch tf when src_is_float); dst t2. The kept dims (up to three, collapsed) are the grid.
// prm: n0 n1 n2 scale src_is_float nr | n[8]@6 s[8]@14 | views src@22 dst@26 | chunks@30
// len@31. Compensated (Kahan) summation keeps long sums accurate; infinities propagate as
// in a plain sum.

// The first-level partial sums of a two-level reduction (reduce_part), float.
@group(0) @binding(9) var<storage, read_write> tp: array<f32>;

// The sum of `count` consecutive elements of the reduced dims, from multi-index `start`
// (element offset `off0`), innermost reduced dim fastest.
fn strided_sum(off0: i32, start: array<i32, 8>, count: i32) -> f32 {
  let nr = pr(5);
  let from_f = pr(4) != 0;
  var idx = start;
  var off = off0;
  var sum = 0.0;
  var comp = 0.0;
  for (var t = 0; t < count; t++) {
    var v: f32;
    if (from_f) { v = tf[off]; } else { v = f32(t1[off]); }
    let yv = v - comp;
    let s2 = sum + yv;
    // An infinite partial sum makes (s2 - sum) NaN: no compensation then.
    comp = select(0.0, (s2 - sum) - yv, is_finite(s2));
    sum = s2;
    for (var d = nr - 1; d >= 0; d--) {
      off += pr(14 + d);
      idx[d] += 1;
      if (idx[d] < pr(6 + d)) { break; }
      off -= pr(6 + d) * pr(14 + d);
      idx[d] = 0;
    }
  }
  return sum;
}

fn reduced_total() -> i32 {
  var total = 1;
  for (var d = 0; d < pr(5); d++) { total *= pr(6 + d); }
  return total;
}

// One pass: an invocation per kept element sums all of its reduced elements.
@compute @workgroup_size(PW)
fn reduce(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
  let g = grid(wid, nwg, lid);
  if (!g.ok) { return; }
  let sum = strided_sum(at(22, g.i0, g.i1, g.i2), array<i32, 8>(0, 0, 0, 0, 0, 0, 0, 0), reduced_total());
  t2[at(26, g.i0, g.i1, g.i2)] = T(prm_f(3) * sum);
}

// The first level of two: the reduced elements of each kept element split into `chunks`
// runs of `len`, one invocation per (run, kept element), kept elements fastest so that
// neighbouring invocations read neighbouring columns. Partial sums go to tp[run * kept +
// kept index]; the host sums them with `reduce`. A linear grid (2-D workgroups).
@compute @workgroup_size(PW)
fn reduce_part(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
  let n1 = pr(1);
  let n2 = pr(2);
  let kept = pr(0) * n1 * n2;
  let i = linear_id(wid, nwg, lid);
  if (i >= kept * pr(30)) { return; }
  let run = i / kept;
  let k = i % kept;
  let r = k / n2;
  let t0 = run * pr(31);
  let count = min(pr(31), reduced_total() - t0);
  var start = array<i32, 8>(0, 0, 0, 0, 0, 0, 0, 0);
  var off = at(22, r / n1, r % n1, k % n2);
  var rem = t0;
  for (var d = pr(5) - 1; d >= 0; d--) {
    start[d] = rem % pr(6 + d);
    off += start[d] * pr(14 + d);
    rem = rem / pr(6 + d);
  }
  tp[i] = strided_sum(off, start, count);
}

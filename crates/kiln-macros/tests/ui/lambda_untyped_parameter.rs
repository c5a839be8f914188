fn main() {
    let k = 2.0f32;
    let _ = kiln_macros::lambda!(move |i, out: ViewMut<f32>| out[i] = k);
}

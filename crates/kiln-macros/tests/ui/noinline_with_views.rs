#[kiln_macros::device(noinline)]
fn blur(src: View<f32>, i: u32) -> f32 {
    0.5 * src[i] + 0.25 * (src[i - 1] + src[i + 1])
}

fn main() {}

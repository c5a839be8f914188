#[kiln_macros::kernel]
fn scale(i: Index1D, xs: &mut [f32], k: f32) {
    xs[i] *= k;
}

fn main() {}

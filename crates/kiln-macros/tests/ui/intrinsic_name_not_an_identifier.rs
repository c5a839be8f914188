#[kiln_macros::intrinsic(cuda = "tgamma(x)")]
fn gamma(x: f32) -> f32 {
    x
}

fn main() {}

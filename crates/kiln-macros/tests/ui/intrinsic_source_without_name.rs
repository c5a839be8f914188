#[kiln_macros::intrinsic(cuda = "twice_cuda", opencl_source = "float twice(float x) { return 2.0f * x; }")]
fn twice(x: f32) -> f32 {
    x * 2.0
}

fn main() {}

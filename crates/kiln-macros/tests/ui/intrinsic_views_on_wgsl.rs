struct View<T>(T);

#[kiln_macros::intrinsic(opencl = "sum2", wgsl = "sum2")]
fn sum_two(x: View<f32>, i: u32) -> f32 {
    x[i] + x[i + 1]
}

fn main() {}

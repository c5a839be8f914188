trait Op {}

#[kiln_macros::kernel]
fn apply(i: Index1D, op: Box<dyn Op>, out: ViewMut<f32>) {
    out[i] = 1.0;
}

fn main() {}

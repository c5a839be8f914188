#[kiln_macros::kernel]
fn checked(i: Index1D, out: ViewMut<f32>) {
    if i > 10 {
        panic!("index too large");
    }
    out[i] = 1.0;
}

fn main() {}

#[kiln_macros::kernel]
fn label(i: Index1D, out: ViewMut<u32>) {
    let name = "kernel";
    out[i] = 1;
}

fn main() {}

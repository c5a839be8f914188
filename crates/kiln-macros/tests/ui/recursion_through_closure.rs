#[kiln_macros::kernel]
fn fib(i: Index1D, out: ViewMut<u32>) {
    let f = |n: u32| n + 1;
    out[i] = f(i);
}

fn main() {}
